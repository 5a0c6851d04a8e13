// Command durafeed-image assembles the container image of durafeed-service
// without Docker: one layer on an empty base (the static binary, a CA
// bundle for TLS to Azure, a non-root user), an OCI configuration with
// its entrypoint, user, port and OCI labels, written as an OCI image
// layout (a directory that registries' tools such as crane, skopeo or
// oras push as is) and as a tarball that `docker load` and `podman load`
// accept.
//
//	make image    # builds the static binary, then: go run ./cmd/durafeed-image -binary build/durafeed-service
//
// The output is reproducible: file times and the creation time come
// from SOURCE_DATE_EPOCH (default: the Unix epoch), so the same binary
// gives the same image digest. The Dockerfile beside this command builds
// the same image for users who have Docker; a test keeps the two in step.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed shape (the Dockerfile states the same; see the test).
const (
	binaryPath = "/durafeed-service"
	caPath     = "/etc/ssl/certs/ca-certificates.crt"
	user       = "65532:65532"
	port       = "8080/tcp"
	homeDir    = "/home/nonroot"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "durafeed-image:", err)
		}
		os.Exit(1)
	}
}

// options are the builder's inputs.
type options struct {
	Binary   string // the static linux binary of durafeed-service
	CABundle string // PEM CA certificates copied to caPath
	Arch     string
	Version  string
	Revision string
	Created  time.Time
	Layout   string // OCI image layout directory to write ("" none)
	Tarball  string // docker-loadable tarball to write ("" none)
	Tag      string // the tarball's image reference
}

func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("durafeed-image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.Binary, "binary", "build/durafeed-service", "static linux binary of durafeed-service (CGO_ENABLED=0)")
	fs.StringVar(&o.CABundle, "ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "PEM CA bundle to include (TLS to Azure Cosmos DB)")
	fs.StringVar(&o.Arch, "arch", "amd64", "the binary's architecture (GOARCH)")
	fs.StringVar(&o.Version, "version", "dev", "org.opencontainers.image.version")
	fs.StringVar(&o.Revision, "revision", "", "org.opencontainers.image.revision (the commit)")
	fs.StringVar(&o.Layout, "layout", "build/image", "OCI image layout directory to write (empty: none)")
	fs.StringVar(&o.Tarball, "tar", "build/durafeed-service.tar", "docker-loadable tarball to write (empty: none)")
	fs.StringVar(&o.Tag, "tag", "durafeed-service:dev", "image reference recorded in the tarball")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o.Created = time.Unix(0, 0).UTC()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
		}
		o.Created = time.Unix(sec, 0).UTC()
	}
	img, err := build(o)
	if err != nil {
		return err
	}
	return write(o, img)
}

// build assembles the image.
func build(o options) (v1.Image, error) {
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, fmt.Errorf("the binary: %w (build it with: make image)", err)
	}
	ca, err := os.ReadFile(o.CABundle)
	if err != nil {
		return nil, fmt.Errorf("the CA bundle: %w", err)
	}
	layerTar, err := rootfs(bin, ca, o.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: o.Created}, CreatedBy: "durafeed-image", Comment: "durafeed-service, CA certificates, non-root user"}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", o.Arch, v1.Time{Time: o.Created}
	cf.Config = v1.Config{
		User:         user,
		Entrypoint:   []string{binaryPath},
		WorkingDir:   homeDir,
		Env:          []string{"SSL_CERT_FILE=" + caPath, "DURAFEED_LISTEN=:8080"},
		ExposedPorts: map[string]struct{}{port: {}},
		Labels: map[string]string{
			"org.opencontainers.image.title":       "durafeed-service",
			"org.opencontainers.image.description": "durable orchestrations for Go on Azure Cosmos DB: the reference service",
			"org.opencontainers.image.version":     o.Version,
			"org.opencontainers.image.revision":    o.Revision,
			"org.opencontainers.image.created":     o.Created.Format(time.RFC3339),
		},
	}
	return mutate.ConfigFile(img, cf)
}

// rootfs is the layer: the binary, the CA bundle, passwd and group files
// naming the non-root user, its home and /tmp; every entry owned by root
// unless said, with the given time.
func rootfs(bin, ca []byte, at time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(p string, mode int64, uid int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p, Mode: mode, Uid: uid, Gid: uid, ModTime: at, Format: tar.FormatPAX})
	}
	file := func(p string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: mode, Size: int64(len(data)), ModTime: at, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	steps := []func() error{
		func() error { return dir("etc/", 0o755, 0) },
		func() error {
			return file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:"+homeDir+":/sbin/nologin\n"))
		},
		func() error { return file("etc/group", 0o644, []byte("root:x:0:\nnonroot:x:65532:\n")) },
		func() error { return dir("etc/ssl/", 0o755, 0) },
		func() error { return dir("etc/ssl/certs/", 0o755, 0) },
		func() error { return file(caPath[1:], 0o644, ca) },
		func() error { return dir("home/", 0o755, 0) },
		func() error { return dir(homeDir[1:]+"/", 0o700, 65532) },
		func() error { return dir("tmp/", 0o1777, 0) },
		func() error { return file(binaryPath[1:], 0o755, bin) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// write writes the image where o says.
func write(o options, img v1.Image) error {
	if o.Layout != "" {
		if err := os.RemoveAll(o.Layout); err != nil {
			return err
		}
		p, err := layout.Write(o.Layout, empty.Index)
		if err != nil {
			return fmt.Errorf("OCI layout: %w", err)
		}
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": o.Tag})); err != nil {
			return fmt.Errorf("OCI layout: %w", err)
		}
	}
	if o.Tarball != "" {
		ref, err := name.NewTag(o.Tag)
		if err != nil {
			return fmt.Errorf("-tag: %w", err)
		}
		if err := tarball.WriteToFile(o.Tarball, ref, img); err != nil {
			return fmt.Errorf("tarball: %w", err)
		}
	}
	return nil
}
