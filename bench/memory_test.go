package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4/middleware"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	throttledmem "github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ulmem "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
)

// How the memory-store benchmarks are read (docs/performance.md has the
// command and the numbers):
//
//   - Every library gets the same limit, translated into its own terms, and
//     its own user-facing "take one token for this key" call.
//   - The throughput cases use a burst so large that no request in a run is
//     denied: the measured path is the "allowed" one, the path a healthy
//     tenant takes. A denial fails the benchmark.
//   - Keys are built before the timer starts, and the throughput cases take
//     a token from each key before the timer starts too, so that they
//     measure requests of tenants the store already knows. The timed
//     requests use copies of the keys the store saw first, as a server reads
//     a fresh key from each request: a map lookup cannot then succeed on
//     pointer equality without comparing the bytes.
//   - The heap case tracks 1,000,000 distinct keys under memHeapLimit, which
//     keeps every key's bucket from being full again (and so droppable) for
//     36 s, and every store is configured not to sweep or evict meanwhile.

// memDrainingLimit is a burst of 1e9 tokens refilled at 100 tokens a second.
// No run drains the burst, so every request is allowed, and every tenant of
// a run asks more often than 100 times a second, so its bucket is never full
// again: a store keeps tracking it.
var memDrainingLimit = tollgate.Limit{Rate: 100, Burst: 1e9}

// memRefillingLimit is the same burst refilled at 1e6 tokens a second: a token
// comes back within a microsecond, so a tenant's bucket is full again by the
// time the tenant asks again, as a well-behaved tenant's bucket usually is.
// tollgate's memory store may drop a full bucket (a full bucket and a missing
// one are the same state), so under this limit it may re-insert keys.
var memRefillingLimit = tollgate.Limit{Rate: 1e6, Burst: 1e9}

// memZipfLimit is a burst of 50 million tokens refilled at one a minute:
// no run drains it, and a request leaves a bucket at least a minute from
// full, longer than a run, so that every store keeps tracking every tenant
// of BenchmarkMemoryZipf, however rarely it is asked for.
var memZipfLimit = tollgate.Limit{Rate: 1.0 / 60, Burst: 50_000_000}

// memHeapLimit is 100 requests an hour with a burst of 100: one request leaves
// a bucket 36 s short of full, far longer than inserting 1,000,000 keys takes.
var memHeapLimit = tollgate.Limit{Rate: 100.0 / 3600, Burst: 100}

// A memTakeFunc takes one token from key's bucket and reports whether the
// request was allowed (false also for an error).
type memTakeFunc func(key string) bool

// A memContender is one library under test: open builds a fresh in-memory store
// for lim (tracking up to maxKeys keys, where the library has such a cap).
type memContender struct {
	name string
	open func(b *testing.B, lim tollgate.Limit, maxKeys int) memStore
}

// A memStore is an open store of one library.
type memStore struct {
	take  memTakeFunc
	keys  func() int // keys tracked now; nil if the library cannot tell
	close func()     // stops background goroutines; nil if there are none
}

// openMemStore opens c's store and closes it when b ends.
func openMemStore(b *testing.B, c memContender, lim tollgate.Limit) memTakeFunc {
	s := c.open(b, lim, 0)
	if s.close != nil {
		b.Cleanup(s.close)
	}
	return s.take
}

// window is the time lim takes to refill an empty bucket, Burst/Rate.
func window(lim tollgate.Limit) time.Duration {
	return time.Duration(float64(lim.Burst) / lim.Rate * float64(time.Second))
}

var memContenders = []memContender{
	{
		// tollgate's memory store, through its Take, the one-bucket call
		// that every store keeps beside the engine's Do.
		name: "tollgate",
		open: func(b *testing.B, lim tollgate.Limit, maxKeys int) memStore {
			var opts []memory.Option
			if maxKeys > 0 {
				opts = append(opts, memory.WithMaxKeys(maxKeys))
			}
			s := memory.New(opts...)
			ctx := context.Background()
			take := func(key string) bool {
				r, err := s.Take(ctx, key, lim, 1)
				return err == nil && r.Allowed
			}
			return memStore{take, func() int { return int(s.Stats().Tenants) }, func() { s.Close() }}
		},
	},
	{
		// Echo's per-key golang.org/x/time/rate store (middleware.RateLimiterMemoryStore).
		name: "echo",
		open: func(b *testing.B, lim tollgate.Limit, _ int) memStore {
			s := middleware.NewRateLimiterMemoryStoreWithConfig(middleware.RateLimiterMemoryStoreConfig{
				Rate:      rate.Limit(lim.Rate),
				Burst:     int(lim.Burst),
				ExpiresIn: 2 * time.Hour, // no stale-visitor cleanup during a run
			})
			take := func(key string) bool {
				ok, err := s.Allow(key)
				return err == nil && ok
			}
			return memStore{take: take}
		},
	},
	{
		// sethvargo/go-limiter's memorystore: Tokens per Interval, default
		// sweeping (every 6 h, of keys idle for 12 h).
		name: "golimiter",
		open: func(b *testing.B, lim tollgate.Limit, _ int) memStore {
			s, err := memorystore.New(&memorystore.Config{
				Tokens:   uint64(lim.Burst),
				Interval: window(lim),
			})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			take := func(key string) bool {
				_, _, _, ok, err := s.Take(ctx, key)
				return err == nil && ok
			}
			return memStore{take: take, close: func() { s.Close(ctx) }}
		},
	},
	{
		// ulule/limiter's memory store behind limiter.Limiter (a fixed
		// window of Burst requests per Burst/Rate), cleanup every 30 s by
		// default; its counters expire with the window.
		name: "ulule",
		open: func(b *testing.B, lim tollgate.Limit, _ int) memStore {
			l := ulule.New(ulmem.NewStore(), ulule.Rate{Period: window(lim), Limit: lim.Burst})
			ctx := context.Background()
			take := func(key string) bool {
				c, err := l.Get(ctx, key)
				return err == nil && !c.Reached
			}
			return memStore{take: take}
		},
	},
	{
		// throttled's GCRA limiter over its memstore, unbounded (maxKeys
		// 0: a plain map, its fastest and leanest configuration).
		name: "throttled",
		open: func(b *testing.B, lim tollgate.Limit, _ int) memStore {
			st, err := throttledmem.NewCtx(0)
			if err != nil {
				b.Fatal(err)
			}
			l, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{
				MaxRate:  throttled.PerDuration(int(lim.Burst), window(lim)),
				MaxBurst: int(lim.Burst) - 1, // throttled allows MaxBurst+1 at once
			})
			if err != nil {
				b.Fatal(err)
			}
			// Two goroutines on one key can lose the compare-and-swap
			// ten times in a row, throttled's default limit, after
			// which it returns an error; let it retry like the others.
			l.SetMaxCASAttemptsLimit(1000)
			ctx := context.Background()
			take := func(key string) bool {
				limited, _, err := l.RateLimitCtx(ctx, key, 1)
				return err == nil && !limited
			}
			return memStore{take: take}
		},
	},
}

// memTenantKeys returns n distinct keys "tenant-0" ... "tenant-<n-1>".
func memTenantKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant-%d", i)
	}
	return keys
}

// memCloneKeys returns copies of keys that share no memory with them.
func memCloneKeys(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = strings.Clone(k)
	}
	return out
}

// BenchmarkMemory compares tollgate's memory store with the in-memory stores
// of Echo, sethvargo/go-limiter, ulule/limiter and throttled, case by case,
// so that `benchstat -col /lib` sets the libraries side by side. ns/op is the
// wall time of one allowed request of a tenant the store already tracks;
// cpu-ns/op is the process's CPU time (all threads, GC included) per request.
// On a machine shared with other jobs ns/op also counts the time spent
// waiting for a CPU and cpu-ns/op does not. In the parallel cases GOMAXPROCS
// goroutines run at once, so there cpu-ns/op is up to GOMAXPROCS x ns/op.
//
//   - case=hotkey-serial: one goroutine, one key, memDrainingLimit: an
//     uncontended bucket.
//   - case=hotkey-parallel: GOMAXPROCS goroutines on one key, memDrainingLimit:
//     every request contends for the same bucket.
//   - case=keys10k-parallel: GOMAXPROCS goroutines over 10,000 keys, each
//     goroutine walking the keys from its own random start, memDrainingLimit:
//     tenants rarely collide.
//   - case=keys10k-refilled-parallel: the same under memRefillingLimit, where
//     every bucket is full again before its tenant's next request.
//
// The heap case is BenchmarkMemoryHeap, run with -benchtime=1x.
func BenchmarkMemory(b *testing.B) {
	hot := memTenantKeys(1)
	keys := memTenantKeys(10_000)
	for _, c := range memContenders {
		b.Run("case=hotkey-serial/lib="+c.name, func(b *testing.B) {
			take := openMemStore(b, c, memDrainingLimit)
			take(hot[0])
			key := strings.Clone(hot[0])
			denied := 0
			b.ReportAllocs()
			b.ResetTimer()
			cpu := cpuTime()
			for range b.N {
				if !take(key) {
					denied++
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
			if denied > 0 {
				b.Fatalf("%d of %d requests denied; the limit must allow all", denied, b.N)
			}
		})
	}
	for _, c := range memContenders {
		b.Run("case=hotkey-parallel/lib="+c.name, func(b *testing.B) {
			memParallel(b, openMemStore(b, c, memDrainingLimit), hot)
		})
	}
	for _, c := range memContenders {
		b.Run("case=keys10k-parallel/lib="+c.name, func(b *testing.B) {
			memParallel(b, openMemStore(b, c, memDrainingLimit), keys)
		})
	}
	for _, c := range memContenders {
		b.Run("case=keys10k-refilled-parallel/lib="+c.name, func(b *testing.B) {
			memParallel(b, openMemStore(b, c, memRefillingLimit), keys)
		})
	}
}

// memParallel takes a token from each of keys, then times b.N requests
// for copies of keys spread over GOMAXPROCS goroutines, each walking the keys
// round-robin from its own random start. It fails b if any timed request is
// denied.
func memParallel(b *testing.B, take memTakeFunc, keys []string) {
	for _, k := range keys {
		take(k)
	}
	keys = memCloneKeys(keys)
	var denied atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		i, n := rand.IntN(len(keys)), 0
		for pb.Next() {
			if !take(keys[i]) {
				n++
			}
			if i++; i == len(keys) {
				i = 0
			}
		}
		denied.Add(int64(n))
	})
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
	// The limit allows every request, so a denial is the library giving up
	// under contention (throttled's memstore does, now and then, when its
	// compare-and-swap keeps losing). Report it rather than abort the run;
	// more than one in a thousand means the case measures the wrong path.
	d := denied.Load()
	b.ReportMetric(float64(d)/float64(b.N), "denied/op")
	if d*1000 > int64(b.N) {
		b.Fatalf("%d of %d requests denied; the limit must allow all", d, b.N)
	}
}

// memZipfKeys is the number of tenants of BenchmarkMemoryZipf, and
// memZipfExponent the exponent of their traffic's Zipf distribution.
const (
	memZipfKeys     = 1_000_000
	memZipfExponent = 1.1
)

// BenchmarkMemoryZipf is traffic as a SaaS back end sees it: 1,000,000
// tenants, all tracked before the timer starts, whose requests follow a Zipf
// distribution with exponent 1.1 (the busiest tenant sends about a tenth of
// all requests, the 100 busiest about two fifths, and most tenants are asked
// for once in a long while), from GOMAXPROCS goroutines, under
// memZipfLimit. Each library gets a store of its own, filled once and kept
// across the rounds of its sub-benchmark.
//
//   - case=keys1M-zipf-parallel: ns/op and cpu-ns/op as in BenchmarkMemory.
func BenchmarkMemoryZipf(b *testing.B) {
	keys := memTenantKeys(memZipfKeys)
	// One sequence of tenants for every library; each goroutine walks it
	// from a random start.
	zipf := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), memZipfExponent, 1, memZipfKeys-1)
	seq := make([]int32, 1<<22)
	for i := range seq {
		seq[i] = int32(zipf.Uint64())
	}
	for _, c := range memContenders {
		s := c.open(b, memZipfLimit, 2*memZipfKeys)
		for _, k := range keys {
			s.take(k)
		}
		clones := memCloneKeys(keys)
		b.Run("case=keys1M-zipf-parallel/lib="+c.name, func(b *testing.B) {
			var denied atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			cpu := cpuTime()
			b.RunParallel(func(pb *testing.PB) {
				i, n := rand.IntN(len(seq)), 0
				for pb.Next() {
					if !s.take(clones[seq[i]]) {
						n++
					}
					if i++; i == len(seq) {
						i = 0
					}
				}
				denied.Add(int64(n))
			})
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(denied.Load())/float64(b.N), "denied/op")
			if d := denied.Load(); d*1000 > int64(b.N) {
				b.Fatalf("%d of %d requests denied; the limit must allow all", d, b.N)
			}
		})
		if s.close != nil {
			s.close()
		}
	}
}

// memPairedBlock is the number of requests the paired benchmarks time in
// one go: short enough that most blocks run without being descheduled on a
// busy machine. A library's turn is memPairedTurn blocks in a row, of which
// the first, run with caches that the other libraries filled, is not
// counted.
const (
	memPairedBlock = 256
	memPairedTurn  = 8
)

// BenchmarkMemorySerialPaired is BenchmarkMemory's hotkey-serial and a
// serial walk over its 10,000 keys, timed as memPairedSerial times its
// cases.
func BenchmarkMemorySerialPaired(b *testing.B) {
	hot := memTenantKeys(1)
	keys := memTenantKeys(10_000)
	stores := memPairedStores(b, hot, keys)
	hotKey := strings.Clone(hot[0])
	clones := memCloneKeys(keys)
	memPairedSerial(b, stores, []memPairedCase{
		{"hotkey", func(int, int) string { return hotKey }},
		{"keys10k", func(_, n int) string { return clones[n%len(clones)] }},
	})
}

// memPairedSerial times cases of one goroutine on each store, every store
// in turn within each iteration (the order rotating), so that all of them
// run under the same load. A turn is memPairedTurn blocks of memPairedBlock
// requests per store and case; the metric <case>-<lib>-ns/op is the median
// over the counted blocks of the wall time per request, which a block that
// was descheduled does not move.
func memPairedSerial(b *testing.B, stores []memNamedTake, cases []memPairedCase) {
	samples := make(map[string][]float64)
	b.ResetTimer()
	for i := range b.N {
		for j := range stores {
			s := stores[(i+j)%len(stores)]
			for _, c := range cases {
				for t := range memPairedTurn {
					from := (i*memPairedTurn + t) * memPairedBlock
					start := time.Now()
					for n := range memPairedBlock {
						s.take(c.key(0, from+n))
					}
					if t > 0 {
						samples[c.name+"-"+s.name] = append(samples[c.name+"-"+s.name], float64(time.Since(start))/memPairedBlock)
					}
				}
			}
		}
	}
	b.StopTimer()
	memReportMedians(b, samples)
}

// memReportMedians reports the median of each named sample as name-ns/op.
func memReportMedians(b *testing.B, samples map[string][]float64) {
	for name, v := range samples {
		slices.Sort(v)
		b.ReportMetric(v[len(v)/2], name+"-ns/op")
	}
}

// BenchmarkMemoryParallelPaired is BenchmarkMemory's hotkey-parallel and
// keys10k-parallel for a machine shared with other work, where the two
// goroutines of a RunParallel seldom hold both cores at once; see
// memPairedParallel.
func BenchmarkMemoryParallelPaired(b *testing.B) {
	hot := memTenantKeys(1)
	keys := memTenantKeys(10_000)
	stores := memPairedStores(b, hot, keys)
	hotKey := strings.Clone(hot[0])
	clones := memCloneKeys(keys)
	memPairedParallel(b, stores, []memPairedCase{
		{"hotkey", func(int, int) string { return hotKey }},
		// The workers walk all keys half the keys apart.
		{"keys10k", func(w, n int) string { return clones[(n+w*len(clones)/2)%len(clones)] }},
	})
}

// BenchmarkMemoryZipfPaired is BenchmarkMemoryZipf's traffic from one
// goroutine, timed as memPairedSerial times its cases, every library's
// store filled with the 1,000,000 tenants at once. (Its two-goroutine form
// seldom gets both cores for a block of such slow requests on a busy
// machine.)
func BenchmarkMemoryZipfPaired(b *testing.B) {
	keys := memTenantKeys(memZipfKeys)
	zipf := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), memZipfExponent, 1, memZipfKeys-1)
	seq := make([]int32, 1<<22)
	for i := range seq {
		seq[i] = int32(zipf.Uint64())
	}
	var stores []memNamedTake
	for _, c := range memContenders {
		s := c.open(b, memZipfLimit, 2*memZipfKeys)
		if s.close != nil {
			b.Cleanup(s.close)
		}
		for _, k := range keys {
			s.take(k)
		}
		stores = append(stores, memNamedTake{c.name, s.take})
	}
	clones := memCloneKeys(keys)
	memPairedSerial(b, stores, []memPairedCase{
		{"keys1M-zipf", func(_, n int) string { return clones[seq[n%len(seq)]] }},
	})
}

// memPairedStores opens every contender's store under memDrainingLimit,
// with the keys of each list already taken once.
func memPairedStores(b *testing.B, keyLists ...[]string) []memNamedTake {
	var stores []memNamedTake
	for _, c := range memContenders {
		take := openMemStore(b, c, memDrainingLimit)
		for _, keys := range keyLists {
			for _, k := range keys {
				take(k)
			}
		}
		stores = append(stores, memNamedTake{c.name, take})
	}
	return stores
}

// A memNamedTake is one library's take function.
type memNamedTake struct {
	name string
	take memTakeFunc
}

// A memPairedCase names a case of memPairedParallel and gives the key of
// the nth request of worker w.
type memPairedCase struct {
	name string
	key  func(w, n int) string
}

// memPairedParallel times cases of two workers on each store. The workers
// take turns over the stores (the order rotating), both starting each block
// of memPairedBlock requests at the same moment from a spinning barrier; a
// block counts only if it is not the first of its turn and each worker's
// part overlapped the other's for at least nine tenths of its time, that is
// if both ran at once. A block's
// figure is its wall time over the requests of both workers, as ns/op in
// RunParallel; the metric <case>-<lib>-ns/op is the median over the blocks
// that counted, and blocks-counted the mean count per library and case.
func memPairedParallel(b *testing.B, stores []memNamedTake, cases []memPairedCase) {
	const workers = 2
	var (
		gen, done atomic.Int64
		job       struct {
			take memTakeFunc
			key  func(w, n int) string
			from int
		}
		spans [workers][2]int64
		quit  atomic.Bool
	)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seen := int64(0)
			for {
				for gen.Load() == seen {
					if quit.Load() {
						return
					}
					runtime.Gosched()
				}
				seen = gen.Load()
				take, key, from := job.take, job.key, job.from
				start := time.Now()
				for n := range memPairedBlock {
					take(key(w, from+n))
				}
				spans[w] = [2]int64{start.UnixNano(), time.Now().UnixNano()}
				done.Add(1)
			}
		}()
	}
	// run times one block and reports its figure, if it counts.
	run := func(take memTakeFunc, key func(w, n int) string, from int) (float64, bool) {
		job.take, job.key, job.from = take, key, from
		done.Store(0)
		gen.Add(1)
		for done.Load() < workers {
			runtime.Gosched()
		}
		first, last := max(spans[0][0], spans[1][0]), min(spans[0][1], spans[1][1])
		for _, sp := range spans {
			if 10*(last-first) < 9*(sp[1]-sp[0]) {
				return 0, false
			}
		}
		whole := max(spans[0][1], spans[1][1]) - min(spans[0][0], spans[1][0])
		return float64(whole) / (workers * memPairedBlock), true
	}
	samples := make(map[string][]float64)
	b.ResetTimer()
	for i := range b.N {
		for j := range stores {
			s := stores[(i+j)%len(stores)]
			for _, c := range cases {
				for t := range memPairedTurn {
					v, ok := run(s.take, c.key, (i*memPairedTurn+t)*memPairedBlock)
					if ok && t > 0 {
						samples[c.name+"-"+s.name] = append(samples[c.name+"-"+s.name], v)
					}
				}
			}
		}
	}
	b.StopTimer()
	quit.Store(true)
	gen.Add(1)
	wg.Wait()
	counted := 0
	for _, v := range samples {
		counted += len(v)
	}
	memReportMedians(b, samples)
	b.ReportMetric(float64(counted)/float64(len(stores)*len(cases)), "blocks-counted")
}

// memHeapKeys is the number of distinct keys BenchmarkMemoryHeap tracks.
const memHeapKeys = 1_000_000

// BenchmarkMemoryHeap measures the live heap each library holds per tracked
// key once it tracks 1,000,000 distinct keys, reported as B/key: HeapAlloc
// after a full GC, less HeapAlloc after a full GC before the store was made,
// divided by 1,000,000. Each key is formatted afresh as it is taken, as a key
// read from a request would be, so a store that keeps the caller's string is
// charged for it and one that copies it is not charged twice.
//
// Each iteration fills a new store, so ns/op is the time to insert 1,000,000
// new keys (formatting included) and allocs/op counts the allocations of a
// whole fill. Run it with -benchtime=1x: one fill per library per count.
func BenchmarkMemoryHeap(b *testing.B) {
	for _, c := range memContenders {
		b.Run(fmt.Sprintf("case=heap-1M-keys/lib=%s", c.name), func(b *testing.B) {
			b.ReportAllocs()
			var perKey float64
			for range b.N {
				b.StopTimer()
				before := memSettledHeap()
				b.StartTimer()
				s := c.open(b, memHeapLimit, 2*memHeapKeys)
				buf := make([]byte, 0, 32)
				for i := range memHeapKeys {
					buf = strconv.AppendInt(append(buf[:0], "tenant-"...), int64(i), 10)
					if !s.take(string(buf)) {
						b.Fatalf("first request of key %d denied", i)
					}
				}
				b.StopTimer()
				after := memSettledHeap()
				if s.keys != nil {
					if n := s.keys(); n != memHeapKeys {
						b.Fatalf("store tracks %d keys, want %d", n, memHeapKeys)
					}
				}
				runtime.KeepAlive(s)
				if s.close != nil {
					s.close()
				}
				perKey += (float64(after) - float64(before)) / memHeapKeys
				b.StartTimer()
			}
			b.ReportMetric(perKey/float64(b.N), "B/key")
		})
	}
}

// memSettledHeap collects garbage until the live heap stops shrinking (stores of
// earlier runs may need a finalizer or a stopped goroutine before they can be
// freed) and returns HeapAlloc.
func memSettledHeap() uint64 {
	var ms runtime.MemStats
	last := ^uint64(0)
	for range 10 {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		if ms.HeapAlloc+64<<10 >= last {
			break
		}
		last = ms.HeapAlloc
		time.Sleep(10 * time.Millisecond)
	}
	return ms.HeapAlloc
}

// memFloodKeys is the number of one-request tenants BenchmarkMemoryFlood
// sends through a Store with the default key cap.
const memFloodKeys = 5_000_000

// BenchmarkMemoryFlood sends 5,000,000 one-request tenants, from GOMAXPROCS
// goroutines, through a memory.Store with the default cap of 1,000,000 keys,
// while 100 real tenants (a burst of 100 at 1/s) sit drained and keep
// asking. The flood's plan (10 requests an hour) leaves each of its buckets
// 6 minutes from full, longer than the real tenants' whole 100 s window, so
// that the order of eviction, not time, is what protects them. Run it with
// -benchtime=1x. It reports:
//
//   - p50-ns, p99-ns, p999-ns, max-ns: the latency of each Take of the
//     flood, the two clock reads around it included;
//   - evictions, drained-evictions: the Store's counters at the end;
//   - tenants-reset: real tenants seen with more than one token (a token
//     comes back each second and they ask every millisecond; a reset bucket
//     has 99), during the flood or after.
func BenchmarkMemoryFlood(b *testing.B) {
	real := tollgate.Limit{Rate: 1, Burst: 100}
	flood := tollgate.Limit{Rate: 10.0 / 3600, Burst: 10}
	for range b.N {
		s := memory.New()
		ctx := context.Background()
		tenants := memTenantKeys(100)
		for _, k := range tenants {
			if r, err := s.Take(ctx, k, real, real.Burst); err != nil || !r.Allowed {
				b.Fatal(r, err)
			}
		}
		reset := make(map[string]bool)
		checkTenants := func() {
			for _, k := range tenants {
				if r, _ := s.Take(ctx, k, real, 1); r.Remaining > 1 {
					reset[k] = true
				}
			}
		}
		stop := make(chan struct{})
		hammered := make(chan struct{})
		go func() {
			defer close(hammered)
			for {
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
					checkTenants()
				}
			}
		}()
		workers := runtime.GOMAXPROCS(0)
		hists := make([]latencyHistogram, workers)
		var wg sync.WaitGroup
		b.ResetTimer()
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h := &hists[w]
				buf := make([]byte, 0, 32)
				for i := w; i < memFloodKeys; i += workers {
					buf = strconv.AppendInt(append(buf[:0], "flood-"...), int64(i), 10)
					key := string(buf)
					start := time.Now()
					r, err := s.Take(ctx, key, flood, 1)
					h.add(time.Since(start))
					if err != nil || !r.Allowed {
						panic(fmt.Sprint("flood request denied: ", r, err))
					}
				}
			}()
		}
		wg.Wait()
		b.StopTimer()
		close(stop)
		<-hammered
		checkTenants()
		st := s.Stats()
		s.Close()
		var all latencyHistogram
		for i := range hists {
			all.merge(&hists[i])
		}
		b.ReportMetric(float64(all.quantile(0.50)), "p50-ns")
		b.ReportMetric(float64(all.quantile(0.99)), "p99-ns")
		b.ReportMetric(float64(all.quantile(0.999)), "p999-ns")
		b.ReportMetric(float64(all.max), "max-ns")
		b.ReportMetric(float64(st.Evictions), "evictions")
		b.ReportMetric(float64(st.DrainedEvictions), "drained-evictions")
		b.ReportMetric(float64(len(reset)), "tenants-reset")
	}
}

// A latencyHistogram counts durations in buckets 16 ns wide up to 64 µs,
// and keeps the longest.
type latencyHistogram struct {
	counts [4096]uint64
	over   uint64 // durations of 64 µs or more
	max    time.Duration
}

func (h *latencyHistogram) add(d time.Duration) {
	if i := int(d / 16); i < len(h.counts) {
		h.counts[i]++
	} else {
		h.over++
	}
	h.max = max(h.max, d)
}

func (h *latencyHistogram) merge(o *latencyHistogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.over += o.over
	h.max = max(h.max, o.max)
}

// quantile returns the upper edge of the bucket that holds quantile q, or
// the longest duration if it lies beyond the buckets.
func (h *latencyHistogram) quantile(q float64) time.Duration {
	total := h.over
	for _, c := range h.counts {
		total += c
	}
	rank := uint64(q * float64(total))
	var seen uint64
	for i, c := range h.counts {
		if seen += c; seen > rank {
			return time.Duration(i+1) * 16
		}
	}
	return h.max
}
