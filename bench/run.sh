#!/usr/bin/env bash
# Runs every benchmark of this module six times, interleaved (each pass runs
# every case once, so a change in machine load hits all libraries alike),
# into results/, then prints the benchstat tables of docs/performance.md and
# keeps them in results/benchstat.txt. results/load.txt gets the machine's
# load average at the start of each pass.
# The Redis cases start a redis-server of their own on a loopback port (or
# use the one TOLLGATE_TEST_REDIS names); redis-server must be on PATH.
# SUITES picks some of memory, adapters, redis, wait, metrics, insights and
# policies (default: all);
# the others' results are left as they are.
set -euo pipefail
cd "$(dirname "$0")"
BENCHSTAT=${BENCHSTAT:-$(go env GOPATH)/bin/benchstat}
[ -x "$BENCHSTAT" ] || go install golang.org/x/perf/cmd/benchstat@latest
PASSES=${PASSES:-6}
SUITES=${SUITES:-memory adapters redis wait metrics insights policies}
has() { [[ " $SUITES " == *" $1 "* ]]; }
go test -c -o /tmp/tollgate-bench.test .
run() { /tmp/tollgate-bench.test -test.run '^$' -test.benchmem "$@"; }
mkdir -p results
for f in $SUITES; do : > "results/$f.txt"; done
: > results/load.txt
if has memory; then : > results/memory-paired.txt; fi
if has adapters; then : > results/adapters-paired.txt; fi
for i in $(seq "$PASSES"); do
	echo "pass $i of $PASSES" >&2
	echo "pass $i: $(uptime)" >> results/load.txt
	if has memory; then
		run -test.bench '^BenchmarkMemory$' >> results/memory.txt
		run -test.bench '^BenchmarkMemoryHeap$' -test.benchtime 1x >> results/memory.txt
		run -test.bench '^BenchmarkMemoryZipf$' >> results/memory.txt
		run -test.bench '^BenchmarkMemoryFlood$' -test.benchtime 1x >> results/memory.txt
		# The same cases timed in short blocks, every library in turn: they
		# hold still on a machine that other work keeps busy.
		run -test.bench '^BenchmarkMemory(Serial|Parallel)Paired$' -test.benchtime 300x >> results/memory-paired.txt
		run -test.bench '^BenchmarkMemoryZipfPaired$' -test.benchtime 50x >> results/memory-paired.txt
	fi
	if has adapters; then
		run -test.bench '^BenchmarkAdapter(GinEcho|V5V3|GRPC)?$' >> results/adapters.txt
		run -test.bench '^BenchmarkAdapterPaired$' -test.benchtime 300x >> results/adapters-paired.txt
	fi
	if has redis; then
		run -test.bench '^BenchmarkRedis(|SerialPaired|RoundTrip)$' >> results/redis.txt
		run -test.bench '^BenchmarkRedisParallelPaired$' -test.benchtime 20x >> results/redis.txt
	fi
	if has wait; then run -test.bench '^BenchmarkWait' >> results/wait.txt; fi
	if has policies; then run -test.bench '^BenchmarkPolicies$' >> results/policies.txt; fi
	if has metrics; then run -test.bench '^BenchmarkMetrics$' >> results/metrics.txt; fi
	if has insights; then
		run -test.bench '^BenchmarkInsights(Observe|ObserveParallel|Decision)$' >> results/insights.txt
		run -test.bench '^BenchmarkInsightsHeap$' -test.benchtime 1x >> results/insights.txt
	fi
done
tables() {
	for f in memory adapters metrics insights policies; do
		if has $f; then
			echo "== $f"
			col=/lib; [ $f = metrics ] && col=/metrics; [ $f = policies ] && col=/policies
			"$BENCHSTAT" -col $col results/$f.txt
		fi
	done
	if has memory; then
		echo "== memory, paired"
		"$BENCHSTAT" results/memory-paired.txt
	fi
	if has adapters; then
		echo "== adapters, paired"
		"$BENCHSTAT" results/adapters-paired.txt
	fi
	if has wait; then
		echo "== wait"
		"$BENCHSTAT" -col /op -filter '.name:Wait' results/wait.txt
		"$BENCHSTAT" -filter '.name:WaitPaired' results/wait.txt
	fi
	if has redis; then
		echo "== redis"
		"$BENCHSTAT" -col /lib -filter '.name:Redis' results/redis.txt
		"$BENCHSTAT" -filter '.name:RedisRoundTrip OR .name:RedisSerialPaired OR .name:RedisParallelPaired' results/redis.txt
	fi
}
tables | tee results/benchstat.txt
