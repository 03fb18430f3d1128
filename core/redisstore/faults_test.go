package redisstore_test

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/redisstore"
	"github.com/tollgate-go/tollgate/core/redistest"
)

// The fault suite: a Limiter over the Redis store, driven through its
// public API, in front of a redis-server of the test's own behind
// testredis's fault-injecting proxy, with each setting of go-redis's
// ContextTimeoutEnabled. Each test logs its figures.

// faultLimiter returns a Limiter over a Store whose client reaches a
// server of its own through a proxy, with the store's default timeout and
// a plan that never denies.
func faultLimiter(t *testing.T, ctxTimeout bool, opts ...redisstore.Option) (*tollgate.Limiter, *redistest.Proxy, *redisstore.Store, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: ctxTimeout})
	t.Cleanup(func() { client.Close() })
	s, err := redisstore.New(client, append([]redisstore.Option{redisstore.WithLogger(nil)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	plan := tollgate.Plan{Name: "p", Limit: tollgate.Limit{Rate: 1e6, Burst: 1e9}}
	l, err := tollgate.New(s, tollgate.SinglePlan(plan), tollgate.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	return l, proxy, s, srv
}

func eachClientSetting(t *testing.T, test func(t *testing.T, ctxTimeout bool)) {
	t.Run("default client", func(t *testing.T) { test(t, false) })
	t.Run("ContextTimeoutEnabled", func(t *testing.T) { test(t, true) })
}

// A result is one decision of an open-loop load.
type result struct {
	at       time.Duration // since the load started
	took     time.Duration
	degraded bool
	failure  string
}

// openLoad makes rate decisions a second for d, each on a goroutine of its
// own (an open loop: a slow answer does not slow the arrivals), over 200
// tenants, and returns them in order of arrival. during, if set, is called
// before each arrival.
func openLoad(l *tollgate.Limiter, rate int, d time.Duration, during func(at time.Duration)) []result {
	var mu sync.Mutex
	var out []result
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	start := time.Now()
	for i := 0; ; i++ {
		at := time.Since(start)
		if at >= d {
			break
		}
		if during != nil {
			during(at)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			dec, err := l.Take(context.Background(), tollgate.Request{Tenant: "tenant-" + strconv.Itoa(i%200)})
			r := result{at: t0.Sub(start), took: time.Since(t0), degraded: err != nil || dec.Degraded, failure: dec.FailureKind()}
			mu.Lock()
			out = append(out, r)
			mu.Unlock()
		}()
		<-tick.C
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b result) int { return int(a.at - b.at) })
	return out
}

// summary describes a load's results between from and to.
type summary struct {
	n, degraded  int
	median, p99  time.Duration
	failureKinds map[string]int
}

func summarize(rs []result, from, to time.Duration) summary {
	s := summary{failureKinds: map[string]int{}}
	var took []time.Duration
	for _, r := range rs {
		if r.at < from || r.at >= to {
			continue
		}
		s.n++
		took = append(took, r.took)
		if r.degraded {
			s.degraded++
			s.failureKinds[r.failure]++
		}
	}
	if len(took) > 0 {
		slices.Sort(took)
		s.median, s.p99 = took[len(took)/2], took[len(took)*99/100]
	}
	return s
}

func (s summary) String() string {
	return fmt.Sprintf("%d decisions, %d degraded (%.2f %%, %v), median %v, p99 %v",
		s.n, s.degraded, 100*float64(s.degraded)/float64(max(s.n, 1)), s.failureKinds, s.median.Round(10*time.Microsecond), s.p99.Round(10*time.Microsecond))
}

// TestFaultSilentRedis: Redis accepts connections and never answers, under
// concurrent traffic. The breaker opens after its threshold and answers at
// once from then on: the median decision over 4 s takes at most 2 ms. When
// Redis answers again, a probe closes the breaker.
func TestFaultSilentRedis(t *testing.T) {
	long(t)
	// The four runs wait more than they work, each on a server of its
	// own: they run side by side.
	for _, rate := range []int{100, 500} {
		t.Run(strconv.Itoa(rate)+"/s", func(t *testing.T) {
			t.Parallel()
			eachClientSetting(t, func(t *testing.T, ctxTimeout bool) {
				t.Parallel()
				l, proxy, s, _ := faultLimiter(t, ctxTimeout)
				openLoad(l, rate, 200*time.Millisecond, nil) // connections up, script loaded
				proxy.Silence()
				rs := openLoad(l, rate, 4*time.Second, nil)
				sum := summarize(rs, 0, time.Hour)
				st := s.Stats()
				t.Logf("silent, %d/s: %v; breaker open %v, opened %d times", rate, sum, st.BreakerOpen, st.BreakerOpens)
				if sum.median > 2*time.Millisecond {
					t.Errorf("median decision %v with Redis silent, want at most 2ms", sum.median)
				}
				if !st.BreakerOpen || st.BreakerOpens != 1 {
					t.Errorf("breaker open %v, opened %d times; want open, once", st.BreakerOpen, st.BreakerOpens)
				}
				proxy.Resume()
				resumed := time.Now()
				for s.Stats().BreakerOpen && time.Since(resumed) < 5*time.Second {
					openLoad(l, rate, 100*time.Millisecond, nil)
				}
				closed := time.Since(resumed)
				after := summarize(openLoad(l, rate, 500*time.Millisecond, nil), 0, time.Hour)
				t.Logf("after Resume: the breaker closed within %v; then %v", closed.Round(10*time.Millisecond), after)
				if s.Stats().BreakerOpen || after.degraded > after.n/100 {
					t.Errorf("Redis answers again, yet the breaker is open (%v) or decisions degrade: %v", s.Stats().BreakerOpen, after)
				}
			})
		})
	}
}

// TestFaultSlowRedis: every reply of Redis comes 30 ms late, the timeout is
// 50 ms, 500 decisions a second from the first: at most 1 % degraded, in
// the first second as over the whole run, while the connections are dialled
// and the script loaded. The proxy that delays the replies shares the
// test's CPUs, and a machine that starves it for the 20 ms of slack makes
// a Redis slower than the timeout, which the store rightly gives up on; so
// a run may be tried three times, each on a new server, and each logs how
// late the proxy was. A store that degrades by its own doing fails all three.
func TestFaultSlowRedis(t *testing.T) {
	long(t)
	eachClientSetting(t, func(t *testing.T, ctxTimeout bool) {
		for attempt := 1; ; attempt++ {
			bad := slowRedisRun(t, ctxTimeout)
			if bad == "" {
				return
			}
			if attempt == 3 {
				t.Errorf("%s, in each of %d runs", bad, attempt)
				return
			}
		}
	})
}

// slowRedisRun runs TestFaultSlowRedis's load once, and returns what it
// found wrong, if anything.
func slowRedisRun(t *testing.T, ctxTimeout bool) string {
	l, proxy, _, _ := faultLimiter(t, ctxTimeout) // New does not dial
	proxy.SetLatency(0, 30*time.Millisecond)
	rs := openLoad(l, 500, 3*time.Second, nil)
	first, all := summarize(rs, 0, time.Second), summarize(rs, 0, time.Hour)
	t.Logf("30 ms per reply, 500/s: first second %v; whole run %v; %d connections; the proxy wrote up to %v late",
		first, all, proxy.Accepted(), proxy.Late().Round(100*time.Microsecond))
	for _, sum := range []summary{first, all} {
		if float64(sum.degraded) > 0.01*float64(sum.n) {
			return "more than 1 % of decisions degraded"
		}
	}
	return ""
}

// TestFaultRedisRestart: Redis is killed under 200 decisions a second and
// started again (empty, without the script) 2 s later. Every decision
// degrades while it is down, the breaker answers most of them at once, and
// within a second of the restart decisions are made by Redis again.
func TestFaultRedisRestart(t *testing.T) {
	long(t)
	eachClientSetting(t, func(t *testing.T, ctxTimeout bool) {
		l, _, s, srv := faultLimiter(t, ctxTimeout)
		openLoad(l, 200, 200*time.Millisecond, nil)
		const killAt, restartAt, length = 500 * time.Millisecond, 2500 * time.Millisecond, 4500 * time.Millisecond
		restarted := make(chan error, 1)
		var killed, started time.Duration
		// A decision in flight at the kill may go either way: the time up
		// ends 100 ms before it, and the time down counts from Kill's
		// return, read on a clock that starts no later than openLoad's.
		loadStart := time.Now()
		rs := openLoad(l, 200, length, func(at time.Duration) {
			if killed == 0 && at >= killAt {
				srv.Kill()
				killed = time.Since(loadStart)
			}
			if started == 0 && at >= restartAt {
				started = at
				go func() { restarted <- srv.Restart() }()
			}
		})
		if err := <-restarted; err != nil {
			t.Fatal(err)
		}
		before, down, back := summarize(rs, 0, killAt-100*time.Millisecond), summarize(rs, killed, restartAt-300*time.Millisecond), summarize(rs, restartAt+time.Second, length)
		t.Logf("before the kill: %v\nwhile down (from %v): %v\nfrom 1 s after the restart: %v\nbreaker opened %d times",
			before, killed.Round(time.Millisecond), down, back, s.Stats().BreakerOpens)
		if before.degraded > 0 || back.degraded > 0 {
			t.Errorf("decisions degraded while Redis was up")
		}
		if down.degraded != down.n || down.median > 2*time.Millisecond {
			t.Errorf("while Redis was down: %v; want every decision degraded, at once", down)
		}
	})
}

// TestFaultCPUSaturated: busy goroutines saturate every core beside 64
// callers of one tenant (20/s, burst 10) for 3 s, healthy Redis, plans
// from a resolver function, plain and behind a CachingResolver. No
// decision degrades or fails, and no more are allowed than the bucket
// holds: burst + rate x elapsed + 1.
func TestFaultCPUSaturated(t *testing.T) {
	long(t)
	for _, caching := range []bool{false, true} {
		t.Run(fmt.Sprintf("caching=%v", caching), func(t *testing.T) {
			client := sharedClient(t)
			s := newStore(t, client)
			plan := tollgate.Plan{Name: "p", Limit: tollgate.Limit{Rate: 20, Burst: 10}}
			var plans tollgate.PlanResolver = tollgate.PlanResolverFunc(func(context.Context, string) (tollgate.Plan, error) { return plan, nil })
			if caching {
				cr, err := tollgate.NewCachingResolver(plans, time.Minute, 100)
				if err != nil {
					t.Fatal(err)
				}
				plans = cr
			}
			l, err := tollgate.New(s, plans, tollgate.WithLogger(nil))
			if err != nil {
				t.Fatal(err)
			}
			stop := saturate()
			defer stop()
			var mu sync.Mutex
			var allowed, degraded, failed, n int
			kinds := map[string]int{}
			var wg sync.WaitGroup
			start := time.Now()
			for range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Since(start) < 3*time.Second {
						d, err := l.Take(context.Background(), tollgate.Request{Tenant: "hot"})
						mu.Lock()
						n++
						switch {
						case err != nil:
							failed++
						case d.Degraded:
							degraded++
							kinds[d.FailureKind()]++
						case d.Allowed:
							allowed++
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			bound := 10 + int(20*elapsed.Seconds()) + 1
			t.Logf("CPU saturated, 64 callers, %v: %d decisions, %d allowed (bound %d), %d degraded (%v), %d errors",
				elapsed.Round(time.Millisecond), n, allowed, bound, degraded, kinds, failed)
			if degraded > 0 || failed > 0 || allowed > bound {
				t.Errorf("%d degraded, %d errors, %d allowed (bound %d); want 0, 0, within the bound", degraded, failed, allowed, bound)
			}
		})
	}
}

// saturate keeps every core busy with goroutines that never block, four per
// core, until the returned func is called.
func saturate() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 * runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := 0
			for {
				select {
				case <-done:
					return
				default:
				}
				for i := range 1 << 16 {
					x += i
				}
			}
		}()
	}
	return func() { close(done); wg.Wait() }
}

// TestFaultFourStores: 64 goroutines on 4 Stores that share one Redis,
// quiet machine, 3 s, one tenant at 100/s, burst 50: no errors, and no
// more allowed than the bucket holds.
func TestFaultFourStores(t *testing.T) {
	long(t)
	client := sharedClient(t)
	prefix := redistest.Prefix(t)
	var stores []*redisstore.Store
	for range 4 {
		c := redis.NewClient(&redis.Options{Addr: client.Options().Addr})
		t.Cleanup(func() { c.Close() })
		s, err := redisstore.New(c, redisstore.WithPrefix(prefix), redisstore.WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
	}
	lim := tollgate.Limit{Rate: 100, Burst: 50}
	var mu sync.Mutex
	var allowed, failed, n int
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[g%len(stores)]
			for time.Since(start) < 3*time.Second {
				r, err := s.Take(context.Background(), "shared", lim, 1)
				mu.Lock()
				n++
				if err != nil {
					failed++
					firstErr = cmp.Or(firstErr, err)
				} else if r.Allowed {
					allowed++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	bound := 50 + int(100*elapsed.Seconds())
	t.Logf("4 stores, 64 goroutines, %v: %d calls, %d allowed (bound %d), %d errors %v",
		elapsed.Round(time.Millisecond), n, allowed, bound, failed, firstErr)
	if failed > 0 || allowed > bound {
		t.Errorf("%d errors, %d allowed (bound %d); want none, within the bound", failed, allowed, bound)
	}
}

// TestFaultTimeZonesLoadedPerCall: a resolver that loads its plan's time
// zone on every call (plans read from a database with a time zone) costs
// at most 5 MB of heap over 20,000 decisions on the Redis store, with and
// without a CachingResolver.
func TestFaultTimeZonesLoadedPerCall(t *testing.T) {
	long(t)
	if _, err := time.LoadLocation("America/New_York"); err != nil {
		t.Skipf("no time zone database: %v", err)
	}
	fromDB := tollgate.PlanResolverFunc(func(context.Context, string) (tollgate.Plan, error) {
		loc, err := time.LoadLocation("America/New_York")
		if err != nil {
			return tollgate.Plan{}, err
		}
		return tollgate.Plan{Name: "daily", Limit: tollgate.Limit{Rate: 1e6, Burst: 1e9},
			Policies: []tollgate.Policy{{Quota: tollgate.Quota{Tokens: 1e12, Period: tollgate.Daily, Location: loc}}}}, nil
	})
	cached, err := tollgate.NewCachingResolver(fromDB, time.Nanosecond, 0)
	if err != nil {
		t.Fatal(err)
	}
	for name, resolver := range map[string]tollgate.PlanResolver{"plain": fromDB, "caching": cached} {
		t.Run(name, func(t *testing.T) {
			// Bounds far past the defaults: this test counts memory,
			// and a round trip or a time zone lookup that a loaded
			// machine (-race, every package at once) stretches past
			// 50 or 100 ms is not its fault.
			l, err := tollgate.New(newStore(t, sharedClient(t), redisstore.WithTimeout(2*time.Second)), resolver,
				tollgate.WithLogger(nil), tollgate.WithResolverTimeout(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			take := func(n int) {
				var wg sync.WaitGroup
				for w := range 16 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := w; i < n; i += 16 {
							if d, err := l.Take(context.Background(), tollgate.Request{Tenant: strconv.Itoa(i % 100)}); err != nil || d.Degraded {
								t.Errorf("decision %d: %+v, %v", i, d.Err, err)
								return
							}
						}
					}()
				}
				wg.Wait()
			}
			take(1000)
			before := heapInUse()
			// 20,000 decisions: a Location kept per decision (about
			// 4 KB) would pass 5 MB in the first 1,300.
			take(20_000)
			growth := int64(heapInUse()) - int64(before)
			t.Logf("heap growth over 20,000 decisions on Redis: %d KB", growth/1024)
			if growth > 5<<20 {
				t.Fatalf("heap grew %d KB over 20,000 decisions, want at most 5 MB", growth/1024)
			}
		})
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
