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
# Environment: AZCOSMOS_VERSION (default v1.5.0), SDKCHECK_RUN (override the
# test regex), SDKCHECK_PARTITIONS (physical ranges per container, default 4).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="${AZCOSMOS_VERSION:-v1.5.0}"
partitions="${SDKCHECK_PARTITIONS:-4}"
tests=(
  TestDatabaseCRUD TestDatabaseWithOfferCRUD TestContainerCRUD TestContainerAutoscaleCRUD
  TestItemCRUD TestItemCRUDforNullPartitionKey TestItemConcurrent TestItemIdEncodingRoutingGW
  TestItemCRUDHierarchicalPartitionKey TestItemTransactionalBatch TestItemTransactionalBatchError
  'TestSinglePartitionQuery.*' 'TestCrossPartitionQuery.*' 'TestHierarchicalPartitionQuery.*'
  TestEmulatorContainerPartitionKeyRangesAndFeedRanges TestEmulatorContainerChangeFeed
  'TestEmulatorChangeFeed_F1_.*' 'TestReadMany_.*' TestReadManyWithQueries_MultipleLogicalPKs
  'TestAAD.*' TestGlobalEndpointManagerEmulator TestGlobalEndpointManagerPolicyEmulator
)
run="${SDKCHECK_RUN:-^($(IFS='|'; echo "${tests[*]}"))\$}"

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

echo "sdkcheck: starting emulator on https://localhost:8081"
"$work/cosmosemu" -addr localhost:8081 -partitions "$partitions" -cert-out "$work/emulator.pem" >"$work/emulator.log" 2>&1 &
emu_pid=$!
for _ in $(seq 1 100); do
  if [[ -s "$work/emulator.pem" ]] && (exec 3<>/dev/tcp/127.0.0.1/8081) 2>/dev/null; then
    break
  fi
  if ! kill -0 "$emu_pid" 2>/dev/null; then
    echo "sdkcheck: emulator exited early:" >&2
    cat "$work/emulator.log" >&2
    exit 1
  fi
  sleep 0.1
done

echo "sdkcheck: preparing scratch module with azcosmos $version"
mkdir -p "$work/mod"
(cd "$work/mod" && go mod init sdkcheck >/dev/null 2>&1 && go get -t "github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos@$version" >/dev/null)

echo "sdkcheck: running $run"
status=0
(cd "$work/mod" && SSL_CERT_FILE="$work/emulator.pem" EMULATOR=true \
  go test github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos -run "$run" -count=1 -v) >"$work/test.log" 2>&1 || status=$?
grep -E '^(--- (PASS|FAIL|SKIP)|ok|FAIL|PASS)' "$work/test.log" || true
if [[ $status -ne 0 ]]; then
  echo "sdkcheck: FAILED (exit $status); full output:" >&2
  grep -vE '^(=== RUN|--- PASS)' "$work/test.log" | tail -200 >&2
fi
exit $status
