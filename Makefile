# durafeed — developer commands. See README.md.
GO ?= go
# The whole suite runs with the race detector; -count=1 defeats the test cache
# so a run always exercises the code.
TEST_FLAGS ?= -race -count=1 -timeout 30m

.PHONY: test lint fmt-check vet staticcheck bicep-check fuzz-smoke demo chaos emulator emulator-sdk-check image service fleet fleet-sweep

# The multi-replica provider tests, run a second time with the peer wake
# channel on (the first run has it off).
PEER_WAKE_TESTS ?= ^(TestReplicas|TestWriterRunsItsOwnWrites|TestEagerWriterKilledMidTurnLosesNothing|TestAwaitHold|TestBusyReplica|TestOneLockAttempt|TestFanOutSpreadsActivities|TestOutboxDeliveredByFeedAfterCrash|TestPinnedInstanceRunsOnCompatibleReplica|TestLateFirstFeedReadLosesNothing|TestFailoverReleasesLocksOfDeadReplica|TestCorruptLeasesWhileReplicasServe|TestOwner)

## test: the whole suite, race detector on; then the multi-replica
## provider tests again with the peer wake channel on.
test:
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || command -v google-chrome >/dev/null 2>&1 || [ -n "$$DURAFEED_CHROME" ]; then echo "Chromium found: the dashboard's browser tests run"; else echo "no Chromium: the browser tests will be skipped (apt-get install chromium)"; fi
	$(GO) test $(TEST_FLAGS) ./...
	DURAFEED_TEST_PEER_WAKE=1 $(GO) test $(TEST_FLAGS) -run '$(PEER_WAKE_TESTS)' ./provider/

## lint: gofmt check, go vet, staticcheck (version pinned in go.mod), and
## the Bicep files parsed with the tree-sitter Bicep grammar.
lint: fmt-check vet staticcheck bicep-check

fmt-check:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

staticcheck:
	$(GO) run honnef.co/go/tools/cmd/staticcheck ./...

## bicep-check: parse infra/bicep with the tree-sitter Bicep grammar (npm
## packages pinned in infra/lint/package-lock.json; needs Node.js and npm).
bicep-check:
	cd infra/lint && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error && node check.mjs ../bicep

## fuzz-smoke: a short run of every wire-format fuzz target.
fuzz-smoke:
	$(GO) test ./durable/ -run '^$$' -fuzz FuzzDecodeWorkItem -fuzztime 20s
	$(GO) test ./durable/history/ -run '^$$' -fuzz FuzzDecodeEvent -fuzztime 20s

## emulator: serve cosmosemu on https://localhost:8081 with the well-known key.
emulator:
	$(GO) run ./cmd/cosmosemu -addr localhost:8081

## emulator-sdk-check: run the azcosmos SDK's own emulator-gated tests
## against cosmosemu (a scratch module outside the repository; needs the
## module proxy and port 8081).
emulator-sdk-check:
	bash cosmosemu/sdkcheck.sh

## demo: the main job (embedded emulator, 3 runtime replicas, a sample workload).
## Pass flags with DEMO_FLAGS, e.g. make demo DEMO_FLAGS="-n 1000 -latency 2ms".
demo:
	$(GO) run ./cmd/durafeed-demo $(DEMO_FLAGS)

## service: the reference service on an embedded emulator (127.0.0.1:8080, no authentication).
service:
	$(GO) run ./cmd/durafeed-service

## image: the service's container image without Docker: a static binary
## (build/durafeed-service), then an OCI image layout (build/image) and a
## docker-loadable tarball (build/durafeed-service.tar). IMAGE_ARCH picks
## the architecture (default amd64); SOURCE_DATE_EPOCH the timestamps.
IMAGE_ARCH ?= amd64
image:
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -trimpath -ldflags="-s -w" -o build/durafeed-service ./cmd/durafeed-service
	$(GO) run ./cmd/durafeed-image -binary build/durafeed-service -arch $(IMAGE_ARCH) \
		-revision "$$(git rev-parse HEAD 2>/dev/null)" -tag durafeed-service:$$(git describe --always --dirty 2>/dev/null || echo dev)

## fleet: the multi-process test: cmd/cosmosemu and three durafeed-service
## processes, 300 orchestrations over HTTP, one service killed, one
## stopped by SIGTERM and replaced, every history checked. With
## COSMOS_ENDPOINT set it runs on that account instead (docs/BENCHMARKING.md).
## Pass flags with FLEET_FLAGS, e.g. make fleet FLEET_FLAGS="-n 600".
fleet:
	$(GO) run ./cmd/durafeed-fleet $(FLEET_FLAGS)

## fleet-sweep: the deployment-shaped load sweep: per (mode, load) its own
## cmd/cosmosemu and three durafeed-service processes with the service's
## defaults, event-driven against polling, latency and RU per orchestration.
## Pass flags with FLEET_SWEEP_FLAGS, e.g.
## make fleet-sweep FLEET_SWEEP_FLAGS="-sweep-peer -out sweep.json -png sweep.png".
fleet-sweep:
	$(GO) run ./cmd/durafeed-fleet -sweep $(FLEET_SWEEP_FLAGS)

## chaos: the chaos campaign (package chaos) in both modes, 1,000 root
## orchestrations each, under injected faults, a partition split and a
## killed replica; exits non-zero when a correctness check fails.
## Pass flags with CHAOS_FLAGS, e.g. make chaos CHAOS_FLAGS="-mode event -n 200 -seed 7".
chaos:
	$(GO) run ./cmd/durafeed-chaos $(CHAOS_FLAGS)
