#!/usr/bin/env bash
# Compares what tollgate adds to a request in every adapter between a base
# revision and the working tree: the same benchmark cases (each framework
# bare and with tollgate, gRPC, and a memory-store decision) from both test
# binaries, one case at a time and the binaries in turn (the order swapping
# every pass), PASSES times, so that load that comes and goes falls on both
# alike. Then benchstat compares base with new.
#
#	bench/compare.sh REV                    # builds REV's bench module in a temporary worktree
#	BASE_TEST=a.test NEW_TEST=b.test bench/compare.sh   # binaries built already
#
# Output: results/compare-base.txt, results/compare-new.txt (the cases run
# for -test.benchtime BENCHTIME), results/compare-paired-base.txt and
# results/compare-paired-new.txt (BenchmarkAdapterPaired: medians of short
# blocks, the figures that hold still on a busy machine, from the second of
# two runs in one process), and the benchstat
# tables in results/compare.txt.
set -euo pipefail
cd "$(dirname "$0")"
BENCHSTAT=${BENCHSTAT:-$(go env GOPATH)/bin/benchstat}
[ -x "$BENCHSTAT" ] || go install golang.org/x/perf/cmd/benchstat@latest
PASSES=${PASSES:-10}
BENCHTIME=${BENCHTIME:-0.5s}
if [ -z "${BASE_TEST:-}" ]; then
	rev=${1:?usage: compare.sh REV, or set BASE_TEST and NEW_TEST}
	wt=$(mktemp -d)/base
	git worktree add --detach "$wt" "$rev" >&2
	trap 'git worktree remove --force "$wt"' EXIT
	BASE_TEST=/tmp/tollgate-bench-base.test
	(cd "$wt/bench" && go test -c -o "$BASE_TEST" .)
fi
if [ -z "${NEW_TEST:-}" ]; then
	NEW_TEST=/tmp/tollgate-bench-new.test
	go test -c -o "$NEW_TEST" .
fi
cases=(
	'^BenchmarkAdapterGinEcho$/^fw=gin$/^lib=(bare|tollgate)$'
	'^BenchmarkAdapterGinEcho$/^fw=echo$/^lib=(bare|tollgate)$'
	'^BenchmarkAdapterV5V3$/^fw=echov5$/^lib=(bare|tollgate)$'
	'^BenchmarkAdapter$/^fw=chi$/^lib=(bare|tollgate)$'
	'^BenchmarkAdapter$/^fw=fiber$/^lib=(bare|tollgate)$'
	'^BenchmarkAdapterV5V3$/^fw=fiberv3$/^lib=(bare|tollgate)$'
	'^BenchmarkAdapterGRPC$/^path=(call|interceptor)$/^lib=(bare|tollgate)$'
	# A decision alone, on the memory store, with no override set.
	'^BenchmarkMemory$/^case=(hotkey-serial|keys10k-parallel)$/^lib=tollgate$'
)
mkdir -p results
for f in compare-base compare-new compare-paired-base compare-paired-new; do : > "results/$f.txt"; done
run() { # run WHICH ARGS...: one run of the base or the new binary
	local which=$1 bin=$BASE_TEST
	shift
	[ "$which" = new ] && bin=$NEW_TEST
	"$bin" -test.run '^$' -test.benchmem "$@"
}
for i in $(seq "$PASSES"); do
	echo "pass $i of $PASSES: $(uptime)" >&2
	order="base new"
	[ $((i % 2)) = 0 ] && order="new base"
	for c in "${cases[@]}"; do
		for which in $order; do
			run "$which" -test.bench "$c" -test.benchtime "$BENCHTIME" >> "results/compare-$which.txt"
		done
	done
	for which in $order; do
		# Twice in one process, keeping the second: a library that
		# settles in its first moments (89d0b17's clock calibrates
		# itself in its first 100 ms) is then timed as it runs for
		# long, whichever framework comes first.
		run "$which" -test.bench '^BenchmarkAdapterPaired$' -test.benchtime 100x -test.count 2 |
			awk '!/^BenchmarkAdapterPaired/ || seen[$1]++' >> "results/compare-paired-$which.txt"
	done
done
{
	echo "== adapters, base against new"
	"$BENCHSTAT" base=results/compare-base.txt new=results/compare-new.txt
	echo "== adapters paired (medians of blocks), base against new"
	"$BENCHSTAT" base=results/compare-paired-base.txt new=results/compare-paired-new.txt
} | tee results/compare.txt
