#!/usr/bin/env bash
# Runs every benchmark of this module six times, interleaved (each pass runs
# every case once, so a change in machine load hits all libraries alike),
# into results/, then prints the benchstat tables of docs/performance.md.
# Needs a Redis on 127.0.0.1:6379 (the Redis cases use DB 15).
set -euo pipefail
cd "$(dirname "$0")"
BENCHSTAT=${BENCHSTAT:-$(go env GOPATH)/bin/benchstat}
[ -x "$BENCHSTAT" ] || go install golang.org/x/perf/cmd/benchstat@latest
PASSES=${PASSES:-6}
go test -c -o /tmp/tollgate-bench.test .
run() { /tmp/tollgate-bench.test -test.run '^$' -test.benchmem "$@"; }
mkdir -p results
: > results/memory.txt; : > results/adapters.txt; : > results/redis.txt
for i in $(seq "$PASSES"); do
	echo "pass $i of $PASSES" >&2
	run -test.bench '^BenchmarkMemory$' >> results/memory.txt
	run -test.bench '^BenchmarkMemoryHeap$' -test.benchtime 1x >> results/memory.txt
	run -test.bench '^BenchmarkAdapter(GinEcho|V5V3)?$' >> results/adapters.txt
	run -test.bench '^BenchmarkRedis' >> results/redis.txt
done
for f in memory adapters; do
	echo "== $f"
	"$BENCHSTAT" -col /lib results/$f.txt
done
echo "== redis"
"$BENCHSTAT" -col /lib -filter '.name:Redis' results/redis.txt
"$BENCHSTAT" -filter '.name:RedisRoundTrip OR .name:RedisSerialPaired' results/redis.txt
