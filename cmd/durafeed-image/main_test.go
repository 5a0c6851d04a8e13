package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/require"
)

// buildService builds the static service binary as `make image` does.
func buildService(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "durafeed-service")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "../durafeed-service")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}

// layoutImage reads the one image of an OCI layout.
func layoutImage(t *testing.T, dir string) v1.Image {
	t.Helper()
	p, err := layout.FromPath(dir)
	require.NoError(t, err)
	idx, err := p.ImageIndex()
	require.NoError(t, err)
	m, err := idx.IndexManifest()
	require.NoError(t, err)
	require.Len(t, m.Manifests, 1)
	require.Equal(t, "durafeed-service:test", m.Manifests[0].Annotations["org.opencontainers.image.ref.name"])
	img, err := idx.Image(m.Manifests[0].Digest)
	require.NoError(t, err)
	return img
}

// TestImage builds the image offline from the service's static binary
// and checks it: OCI media types, the configuration (non-root user,
// entrypoint, port, labels), the files, a reproducible digest, a tarball
// of the same image, and the binary inside, which is static and runs.
func TestImage(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the image holds a linux binary; this test runs it") // CI runs on linux
	}
	t.Parallel()
	dir := t.TempDir()
	bin := buildService(t, dir)
	args := func(out string) []string {
		return []string{"-binary", bin, "-arch", runtime.GOARCH, "-revision", "abc123", "-version", "1.2.3", "-tag", "durafeed-service:test",
			"-layout", filepath.Join(dir, out), "-tar", filepath.Join(dir, out+".tar")}
	}
	var stderr bytes.Buffer
	require.NoError(t, run(args("one"), &stderr), stderr.String())
	img := layoutImage(t, filepath.Join(dir, "one"))

	mt, err := img.MediaType()
	require.NoError(t, err)
	require.Equal(t, types.OCIManifestSchema1, mt)
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	require.Equal(t, "linux", cf.OS)
	require.Equal(t, runtime.GOARCH, cf.Architecture)
	require.Equal(t, "65532:65532", cf.Config.User, "non-root")
	require.Equal(t, []string{"/durafeed-service"}, cf.Config.Entrypoint)
	require.Equal(t, map[string]struct{}{"8080/tcp": {}}, cf.Config.ExposedPorts)
	require.Equal(t, "/home/nonroot", cf.Config.WorkingDir)
	require.Contains(t, cf.Config.Env, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt")
	require.Equal(t, "durafeed-service", cf.Config.Labels["org.opencontainers.image.title"])
	require.Equal(t, "abc123", cf.Config.Labels["org.opencontainers.image.revision"])
	require.Equal(t, "1.2.3", cf.Config.Labels["org.opencontainers.image.version"])

	// The files.
	files := map[string]*tar.Header{}
	var binary, passwd, ca []byte
	tr := tar.NewReader(mutate.Extract(img))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		files[h.Name] = h
		switch h.Name {
		case "durafeed-service":
			binary, err = io.ReadAll(tr)
		case "etc/passwd":
			passwd, err = io.ReadAll(tr)
		case "etc/ssl/certs/ca-certificates.crt":
			ca, err = io.ReadAll(tr)
		}
		require.NoError(t, err)
	}
	require.EqualValues(t, 0o755, files["durafeed-service"].Mode)
	require.Contains(t, string(passwd), "nonroot:x:65532:65532:")
	require.Contains(t, string(ca), "BEGIN CERTIFICATE")
	require.Equal(t, 65532, files["home/nonroot"].Uid)
	require.EqualValues(t, 0o1777, files["tmp"].Mode)

	// The binary inside is static and runs: a bad configuration exits 2
	// with its message.
	runDir := t.TempDir()
	exe := filepath.Join(runDir, "durafeed-service")
	require.NoError(t, os.WriteFile(exe, binary, 0o755))
	ef, err := elf.Open(exe)
	require.NoError(t, err)
	for _, p := range ef.Progs {
		require.NotEqual(t, elf.PT_INTERP, p.Type, "statically linked: no program interpreter")
	}
	require.NoError(t, ef.Close())
	cmd := exec.Command(exe)
	cmd.Env = []string{"DURAFEED_MODE=bad"}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out)
	require.Equal(t, 2, exit.ExitCode())
	require.Contains(t, string(out), "DURAFEED_MODE")

	// Reproducible, and the tarball holds the same image.
	require.NoError(t, run(args("two"), &stderr), stderr.String())
	d1, err := img.Digest()
	require.NoError(t, err)
	d2, err := layoutImage(t, filepath.Join(dir, "two")).Digest()
	require.NoError(t, err)
	require.Equal(t, d1, d2, "the same binary gives the same digest")
	tag, err := name.NewTag("durafeed-service:test")
	require.NoError(t, err)
	fromTar, err := tarball.ImageFromPath(filepath.Join(dir, "one.tar"), &tag)
	require.NoError(t, err)
	cd1, err := img.ConfigName()
	require.NoError(t, err)
	cd2, err := fromTar.ConfigName()
	require.NoError(t, err)
	require.Equal(t, cd1, cd2, "the tarball holds the same configuration")
}

// TestBadInputs: a missing binary or CA bundle is a clear error and
// writes nothing.
func TestBadInputs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var stderr bytes.Buffer
	err := run([]string{"-binary", filepath.Join(dir, "none"), "-layout", filepath.Join(dir, "l"), "-tar", filepath.Join(dir, "t.tar")}, &stderr)
	require.ErrorContains(t, err, "the binary")
	bin := filepath.Join(dir, "bin")
	require.NoError(t, os.WriteFile(bin, []byte("x"), 0o755))
	err = run([]string{"-binary", bin, "-ca-bundle", filepath.Join(dir, "none.pem"), "-layout", filepath.Join(dir, "l"), "-tar", filepath.Join(dir, "t.tar")}, &stderr)
	require.ErrorContains(t, err, "the CA bundle")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "nothing written but the test's own file")
	require.Error(t, run([]string{"-tag", "Not A Tag!", "-binary", bin, "-ca-bundle", bin, "-layout", "", "-tar", filepath.Join(dir, "t.tar")}, &stderr))
}

// TestDockerfileMatchesImage: the Dockerfile for Docker users builds the
// image this command assembles: an empty base, the same user,
// entrypoint, port, working directory and environment.
func TestDockerfileMatchesImage(t *testing.T) {
	t.Parallel()
	f, err := os.Open("../../Dockerfile")
	require.NoError(t, err)
	defer f.Close()
	var stages []string
	got := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		word, rest, _ := strings.Cut(line, " ")
		switch word {
		case "FROM":
			stages = append(stages, rest)
			got = map[string][]string{} // the final stage's instructions count
		case "USER", "ENTRYPOINT", "EXPOSE", "WORKDIR", "ENV":
			got[word] = append(got[word], rest)
		}
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, stages)
	require.Equal(t, "scratch", stages[len(stages)-1], "the final stage is an empty base")
	require.Equal(t, []string{user}, got["USER"])
	require.Equal(t, []string{`["` + binaryPath + `"]`}, got["ENTRYPOINT"])
	require.Equal(t, []string{port}, got["EXPOSE"])
	require.Equal(t, []string{homeDir}, got["WORKDIR"])
	require.ElementsMatch(t, []string{"SSL_CERT_FILE=" + caPath, "DURAFEED_LISTEN=:8080"}, got["ENV"])
}
