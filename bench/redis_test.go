package bench

import (
	"context"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/throttled/throttled/v2"
	throttledredis "github.com/throttled/throttled/v2/store/goredisstore.v9"
	ulule "github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/redisstore"
	"github.com/tollgate-go/tollgate/core/redistest"
	"github.com/tollgate-go/tollgate/core/storekit"
)

// How the Redis-store benchmarks are read (docs/performance.md has the
// commands and the numbers):
//
//   - Every library talks to the same Redis (a redis-server on a loopback
//     port that this test binary starts, or the one TOLLGATE_TEST_REDIS
//     names; see internal/testredis) through a go-redis v9 client of its
//     own with go-redis's default options, and gets the same limit in its
//     own terms. Each case keeps its keys under a prefix of its own, and
//     deletes them when it ends.
//   - BenchmarkRedisSerialPaired: one caller, one tenant whose limit never
//     denies: the latency of one decision, every library in turn within each
//     iteration (and a PING, the bare round trip), reported as medians and
//     90th percentiles.
//   - BenchmarkRedis case=keys10k-parallel: 128 concurrent callers over
//     10,000 tenants, limits that never deny: decisions per second.
//     case=flood: 128 callers on one tenant that is over its limit, so
//     (after the first) every request is denied: the cost of a denial.
//   - BenchmarkRedisParallelPaired: keys10k-parallel in short blocks, every
//     library in turn, for a machine shared with other work.
//   - BenchmarkRedisRoundTrip is one PING, serial: the round trip that
//     every decision of a serial caller costs at least.
//   - lib=tollgate uses go-redis's default options; lib=tollgate-ctx sets
//     ContextTimeoutEnabled, which must make no difference (the store never
//     hands go-redis a context that expires). The store's own timeout is
//     raised out of the way (see openRedisStore).
//   - lib=tollgate-quota decides on the same limit plus a daily quota, in
//     one Op (Store.Do): a plan with a burst rate and a quota.
//   - ulule/limiter counts a fixed window (its algorithm), the others run
//     GCRA; throttled's store takes two round trips a decision (GET, then a
//     compare-and-swap script), the others one script call.

// TestMain stops the shared Redis, by its PID, once the benchmarks are
// done.
func TestMain(m *testing.M) { os.Exit(redistest.Run(m)) }

// openLimit never denies within a run: a burst of 1e9 tokens refilled at
// 100 a second, as the memory benchmarks' drainingLimit.
var openLimit = tollgate.Limit{Rate: 100, Burst: 1e9}

// floodLimit denies all but the first request of a run.
var floodLimit = tollgate.Limit{Rate: 1.0 / 3600, Burst: 1}

// A redisContender is one library under test: open returns its decision
// function for lim over client, keys under prefix.
type redisContender struct {
	name string
	open func(b *testing.B, client *redis.Client, prefix string, lim tollgate.Limit) func(ctx context.Context, key string) (allowed bool, err error)
}

var redisContenders = []redisContender{
	{"tollgate", openTollgate(false)},
	{"tollgate-ctx", openTollgate(true)},
	{"tollgate-quota", openTollgateQuota},
	{"redis_rate", func(b *testing.B, client *redis.Client, prefix string, lim tollgate.Limit) func(context.Context, string) (bool, error) {
		l := redis_rate.NewLimiter(client)
		limit := redis_rate.Limit{Rate: int(lim.Rate * 3600), Burst: int(lim.Burst), Period: time.Hour}
		return func(ctx context.Context, key string) (bool, error) {
			r, err := l.Allow(ctx, prefix+key, limit)
			if err != nil {
				return false, err
			}
			return r.Allowed > 0, nil
		}
	}},
	{"ulule", func(b *testing.B, client *redis.Client, prefix string, lim tollgate.Limit) func(context.Context, string) (bool, error) {
		store, err := ulredis.NewStoreWithOptions(client, ulule.StoreOptions{Prefix: prefix, MaxRetry: ulule.DefaultMaxRetry})
		if err != nil {
			b.Fatal(err)
		}
		// A fixed window of Burst requests per Burst/Rate.
		window := window(lim)
		if window < time.Second {
			window = time.Second
		}
		l := ulule.New(store, ulule.Rate{Period: window, Limit: lim.Burst})
		return func(ctx context.Context, key string) (bool, error) {
			r, err := l.Get(ctx, key)
			if err != nil {
				return false, err
			}
			return !r.Reached, nil
		}
	}},
	{"throttled", func(b *testing.B, client *redis.Client, prefix string, lim tollgate.Limit) func(context.Context, string) (bool, error) {
		store, err := throttledredis.NewCtx(client, prefix)
		if err != nil {
			b.Fatal(err)
		}
		rate := throttled.PerHour(int(lim.Rate * 3600))
		l, err := throttled.NewGCRARateLimiterCtx(store, throttled.RateQuota{MaxRate: rate, MaxBurst: int(lim.Burst) - 1})
		if err != nil {
			b.Fatal(err)
		}
		return func(ctx context.Context, key string) (bool, error) {
			limited, _, err := l.RateLimitCtx(ctx, key, 1)
			return !limited, err
		}
	}},
}

// openOwn opens c for lim on a client and a key prefix of b's own. The
// prefix comes first, so that its keys are deleted after the client is
// closed (clean-ups run last first): no late write outlives the deletion.
func (c redisContender) openOwn(b *testing.B, lim tollgate.Limit) func(context.Context, string) (bool, error) {
	prefix := benchPrefix(b, c.name)
	return c.open(b, benchClient(b), prefix, lim)
}

// openTollgate opens tollgate's Redis store. With ctxTimeout the client sets
// ContextTimeoutEnabled, which must change nothing.
func openTollgate(ctxTimeout bool) func(*testing.B, *redis.Client, string, tollgate.Limit) func(context.Context, string) (bool, error) {
	return func(b *testing.B, client *redis.Client, prefix string, lim tollgate.Limit) func(context.Context, string) (bool, error) {
		if ctxTimeout {
			client = redis.NewClient(&redis.Options{Addr: redistest.Shared(b), ContextTimeoutEnabled: true})
			b.Cleanup(func() { client.Close() })
		}
		s := openRedisStore(b, client, prefix)
		return func(ctx context.Context, key string) (bool, error) {
			r, err := s.Take(ctx, key, lim, 1)
			return r.Allowed, err
		}
	}
}

// openRedisStore opens tollgate's Redis store under prefix. The other
// libraries have no timeout of their own, so the store's is raised to ten
// seconds: a loaded machine's stall then fails no decision of a run.
func openRedisStore(b *testing.B, client *redis.Client, prefix string) *redisstore.Store {
	s, err := redisstore.New(client, redisstore.WithPrefix(prefix), redisstore.WithTimeout(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// openTollgateQuota decides on lim plus a daily quota, in one Op: the
// shape of a plan with a burst rate and a quota.
func openTollgateQuota(b *testing.B, client *redis.Client, prefix string, lim tollgate.Limit) func(context.Context, string) (bool, error) {
	s := openRedisStore(b, client, prefix)
	day := tollgate.Quota{Tokens: 999_999_999_999_999, Period: tollgate.Daily}
	rules := []storekit.Rule{
		storekit.BucketRule(lim.Rate, lim.Burst),
		{Kind: storekit.Quota, Name: "day", Burst: day.Tokens, Period: day.Bounds},
	}
	return func(ctx context.Context, key string) (bool, error) {
		op := storekit.Op{Kind: storekit.Take, Tenant: key, Rules: rules, Cost: 1}
		err := s.Do(ctx, &op)
		return op.Allowed, err
	}
}

// benchClient returns a client of the shared Redis.
func benchClient(b *testing.B) *redis.Client {
	b.Helper()
	c := redis.NewClient(&redis.Options{Addr: redistest.Shared(b)})
	b.Cleanup(func() { c.Close() })
	if err := c.Ping(context.Background()).Err(); err != nil {
		b.Fatalf("the shared Redis on %s does not answer: %v", c.Options().Addr, err)
	}
	return c
}

// benchPrefix returns a key prefix of b's own for the library name. Every
// key written under it is deleted when b ends, redis_rate's too (it puts
// "rate:" in front of the keys it is given).
func benchPrefix(b *testing.B, name string) string {
	prefix := redistest.Prefix(b) + name + ":"
	addr := redistest.Shared(b)
	b.Cleanup(func() {
		if _, err := redistest.DeleteKeys(addr, "rate:"+prefix); err != nil {
			b.Error(err)
		}
	})
	return prefix
}

// reportRate reports decisions per second and, if cpu0 is not negative,
// the CPU time this process used per decision since cpu0 (all threads, GC
// included; Redis's own CPU is not counted).
func reportRate(b *testing.B, cpu0 time.Duration) {
	b.StopTimer()
	if cpu0 >= 0 {
		b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

func BenchmarkRedis(b *testing.B) {
	ctx := context.Background()
	tenants := make([]string, 10_000)
	for i := range tenants {
		tenants[i] = "tenant-" + strconv.Itoa(i)
	}
	for _, c := range redisContenders {
		b.Run("case=keys10k-parallel/lib="+c.name, func(b *testing.B) {
			take := c.openOwn(b, openLimit)
			var failed atomic.Int64
			b.SetParallelism(64) // 128 callers on 2 CPUs
			b.ResetTimer()
			cpu0 := cpuTime()
			b.RunParallel(func(pb *testing.PB) {
				i := rand.IntN(len(tenants))
				for pb.Next() {
					if ok, err := take(ctx, tenants[i]); !ok || err != nil {
						failed.Add(1)
					}
					i = (i + 1) % len(tenants)
				}
			})
			reportRate(b, cpu0)
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d of %d decisions denied or failed", n, b.N)
			}
		})
		b.Run("case=flood/lib="+c.name, func(b *testing.B) {
			if c.name == "tollgate-ctx" || c.name == "tollgate-quota" {
				b.Skip("the flood of lib=tollgate is theirs too")
			}
			take := c.openOwn(b, floodLimit)
			take(ctx, "flooding-tenant") // the one allowed request
			var allowed, failed atomic.Int64
			var firstErr atomic.Value
			b.SetParallelism(64)
			b.ResetTimer()
			cpu0 := cpuTime()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					ok, err := take(ctx, "flooding-tenant")
					if err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err)
					} else if ok {
						allowed.Add(1)
					}
				}
			})
			reportRate(b, cpu0)
			if allowed.Load() > 0 || failed.Load() > 0 {
				b.Fatalf("an over-limit tenant got %d allowed, %d failed of %d (%v)", allowed.Load(), failed.Load(), b.N, firstErr.Load())
			}
		})
	}
}

// redisPairedCallers and redisPairedBlock shape BenchmarkRedisParallelPaired:
// each block is redisPairedBlock decisions from redisPairedCallers
// goroutines at once, as many as BenchmarkRedis's keys10k-parallel has.
const (
	redisPairedCallers = 128
	redisPairedBlock   = 4096
)

// BenchmarkRedisParallelPaired is BenchmarkRedis's keys10k-parallel for a
// machine shared with other work: every library in turn within each
// iteration (the order rotating) serves one block of decisions from 128
// callers over 10,000 tenants, so that the load, which comes and goes,
// falls on all of them alike. It reports the median over the blocks of
// each library's decisions per second, <lib>-decisions/s, and the ratio of
// tollgate's median to redis_rate's, tollgate/redis_rate. Run it with
// -benchtime=20x or so.
func BenchmarkRedisParallelPaired(b *testing.B) {
	ctx := context.Background()
	tenants := make([]string, 10_000)
	for i := range tenants {
		tenants[i] = "tenant-" + strconv.Itoa(i)
	}
	var names []string
	var takes []func(context.Context, string) (bool, error)
	for _, c := range redisContenders {
		if c.name == "tollgate-ctx" || c.name == "tollgate-quota" {
			continue
		}
		names = append(names, c.name)
		takes = append(takes, c.openOwn(b, openLimit))
	}
	// block serves one block through take and returns its decisions per
	// second; the connections it needs are dialled by a first, untimed
	// block of every library.
	block := func(take func(context.Context, string) (bool, error), from int) float64 {
		var wg sync.WaitGroup
		var failed atomic.Int64
		start := time.Now()
		for w := range redisPairedCallers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := w; n < redisPairedBlock; n += redisPairedCallers {
					if ok, err := take(ctx, tenants[(from+n)%len(tenants)]); !ok || err != nil {
						failed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if n := failed.Load(); n > 0 {
			b.Fatalf("%d of %d decisions denied or failed", n, redisPairedBlock)
		}
		return redisPairedBlock / time.Since(start).Seconds()
	}
	for _, take := range takes {
		block(take, 0)
	}
	samples := make([][]float64, len(takes))
	b.ResetTimer()
	for i := range b.N {
		for j := range takes {
			k := (i + j) % len(takes)
			samples[k] = append(samples[k], block(takes[k], i*redisPairedBlock))
		}
	}
	b.StopTimer()
	median := map[string]float64{}
	for k, v := range samples {
		slices.Sort(v)
		median[names[k]] = v[len(v)/2]
		b.ReportMetric(median[names[k]], names[k]+"-decisions/s")
	}
	b.ReportMetric(median["tollgate"]/median["redis_rate"], "tollgate/redis_rate")
}

// BenchmarkRedisRoundTrip is one PING on the same Redis, serial: the round
// trip every decision of the other libraries costs at least.
func BenchmarkRedisRoundTrip(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	for b.Loop() {
		if err := c.Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, -1)
}

// BenchmarkRedisSerialPaired measures the latency of one decision, one
// caller, for every library in turn within each iteration, so that the load
// of a shared machine, which comes and goes, falls on all of them alike. It
// reports each library's median and 90th percentile in microseconds; ns/op
// is the whole round of libraries and means nothing on its own.
func BenchmarkRedisSerialPaired(b *testing.B) {
	ctx := context.Background()
	var takes []func(context.Context, string) (bool, error)
	var names []string
	for _, c := range redisContenders {
		if c.name == "tollgate-quota" {
			continue
		}
		names = append(names, c.name)
		takes = append(takes, c.openOwn(b, openLimit))
	}
	ping := benchClient(b)
	names = append(names, "ping")
	takes = append(takes, func(ctx context.Context, _ string) (bool, error) { return true, ping.Ping(ctx).Err() })
	for _, take := range takes { // connections are dialled before the timer starts
		take(ctx, "serial-tenant")
	}
	samples := make([][]time.Duration, len(takes))
	i := 0
	for b.Loop() {
		for j := range takes {
			k := (i + j) % len(takes) // rotate who goes first
			t0 := time.Now()
			if ok, err := takes[k](ctx, "serial-tenant"); !ok || err != nil {
				b.Fatalf("%s: denied or failed: %v", names[k], err)
			}
			samples[k] = append(samples[k], time.Since(t0))
		}
		i++
	}
	for k, s := range samples {
		slices.Sort(s)
		b.ReportMetric(float64(s[len(s)/2])/1e3, names[k]+"-p50-µs")
		b.ReportMetric(float64(s[len(s)*9/10])/1e3, names[k]+"-p90-µs")
	}
}
