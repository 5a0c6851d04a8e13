#!/bin/sh
# old and new binaries, alternated, in one run
cd "$(dirname "$0")"
ARGS='-sweep 100ms,1s,burst -sweep-scale 0.5 -latencies 2ms -cases "" -replicas 1 -failover -1s -png ""'
for round in 1 2; do
  for b in old new; do
    echo "== $b round $round $(date -u +%T)"
    eval ./bench-$b $ARGS -out ./$b-$round.json > ./$b-$round.txt 2>&1
    echo "exit $?"
  done
done
echo "== end $(date -u +%T)"
