#!/usr/bin/env bash
# Runs the azcosmos SDK's own emulator-gated tests against cosmosemu.
#
# Builds ./cmd/cosmosemu, serves it on https://localhost:8081 with the
# well-known key, creates a scratch module (outside the repository) that
# depends on azcosmos, runs the list of emulator tests below with the
# emulator's self-signed certificate trusted through SSL_CERT_FILE (the SDK's
# Entra ID tests use the default TLS verification), then stops the emulator.
# Exits non-zero when a test fails.
#
# Two passes, one emulator at a time on port 8081:
#   1. tests, with SDKCHECK_PARTITIONS physical ranges per container;
#   2. single_range_tests, with one range per container. These assert the
#      order of cross-partition results without ORDER BY as Microsoft's
#      emulator returns them for its single-partition containers (creation
#      order across partition keys). cosmosemu, like the service, fans out
#      range by range, so with several ranges the order legitimately
#      differs (TestHierarchicalPartitionQueryNoPartition's keys hash to
#      different ranges; TestCrossPartitionQuery's V1 keys share one).
#
# Environment: AZCOSMOS_VERSION (default v1.5.0), SDKCHECK_RUN (run only this
# test regex, in one pass with SDKCHECK_PARTITIONS ranges),
# SDKCHECK_PARTITIONS (physical ranges per container in pass 1, default 4).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="${AZCOSMOS_VERSION:-v1.5.0}"
partitions="${SDKCHECK_PARTITIONS:-4}"
tests=(
  TestDatabaseCRUD TestDatabaseWithOfferCRUD TestContainerCRUD TestContainerAutoscaleCRUD
  TestItemCRUD TestItemCRUDforNullPartitionKey TestItemConcurrent TestItemIdEncodingRoutingGW
  TestItemCRUDHierarchicalPartitionKey TestItemTransactionalBatch TestItemTransactionalBatchError
  'TestSinglePartitionQuery.*' 'TestCrossPartitionQuery.*'
  TestHierarchicalPartitionQuerySinglePartition TestHierarchicalPartitionQueryParentPartition
  TestEmulatorContainerPartitionKeyRangesAndFeedRanges TestEmulatorContainerChangeFeed
  'TestEmulatorChangeFeed_F1_.*' 'TestReadMany_.*' TestReadManyWithQueries_MultipleLogicalPKs
  'TestAAD.*' TestGlobalEndpointManagerEmulator TestGlobalEndpointManagerPolicyEmulator
)
single_range_tests=(TestHierarchicalPartitionQueryNoPartition TestCrossPartitionQuery)
regex() { local IFS='|'; echo "^($*)\$"; }

work="$(mktemp -d)"
emu_pid=""
cleanup() {
  if [[ -n "$emu_pid" ]] && kill -0 "$emu_pid" 2>/dev/null; then
    kill "$emu_pid" 2>/dev/null || true
    wait "$emu_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

echo "sdkcheck: building emulator"
(cd "$repo" && go build -o "$work/cosmosemu" ./cmd/cosmosemu)

start_emulator() { # $1: physical ranges per container
  rm -f "$work/emulator.pem"
  echo "sdkcheck: starting emulator on https://localhost:8081 ($1 ranges per container)"
  "$work/cosmosemu" -addr localhost:8081 -partitions "$1" -cert-out "$work/emulator.pem" >"$work/emulator.log" 2>&1 &
  emu_pid=$!
  for _ in $(seq 1 100); do
    if [[ -s "$work/emulator.pem" ]] && (exec 3<>/dev/tcp/127.0.0.1/8081) 2>/dev/null; then
      return 0
    fi
    if ! kill -0 "$emu_pid" 2>/dev/null; then
      echo "sdkcheck: emulator exited early:" >&2
      cat "$work/emulator.log" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "sdkcheck: emulator did not start" >&2
  exit 1
}

stop_emulator() {
  if [[ -n "$emu_pid" ]] && kill -0 "$emu_pid" 2>/dev/null; then
    kill "$emu_pid" 2>/dev/null || true
    wait "$emu_pid" 2>/dev/null || true
  fi
  emu_pid=""
}

echo "sdkcheck: preparing scratch module with azcosmos $version"
mkdir -p "$work/mod"
(cd "$work/mod" && go mod init sdkcheck >/dev/null 2>&1 && go get -t "github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos@$version" >/dev/null)

status=0
run_pass() { # $1: ranges per container, $2: test regex
  start_emulator "$1"
  echo "sdkcheck: running $2"
  local rc=0
  (cd "$work/mod" && SSL_CERT_FILE="$work/emulator.pem" EMULATOR=true \
    go test github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos -run "$2" -count=1 -v) >"$work/test.log" 2>&1 || rc=$?
  stop_emulator
  grep -E '^(--- (PASS|FAIL|SKIP)|ok|FAIL|PASS)' "$work/test.log" || true
  if [[ $rc -ne 0 ]]; then
    echo "sdkcheck: FAILED (exit $rc); full output:" >&2
    grep -vE '^(=== RUN|--- PASS)' "$work/test.log" | tail -200 >&2
    status=$rc
  fi
}

if [[ -n "${SDKCHECK_RUN:-}" ]]; then
  run_pass "$partitions" "$SDKCHECK_RUN"
else
  run_pass "$partitions" "$(regex "${tests[@]}")"
  run_pass 1 "$(regex "${single_range_tests[@]}")"
fi
exit $status
