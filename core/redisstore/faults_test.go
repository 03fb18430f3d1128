package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/redisstore"
	"github.com/tollgate-go/tollgate/internal/testredis"
)

// The fault suite: a Limiter over the Redis store, driven through its
// public API, in front of a real redis-server behind testredis's
// fault-injecting proxy, with each client setting. docs/failure-modes.md
// gives the figures these tests print.

// faultLimiter returns a Limiter over a Store whose client reaches srv
// through a proxy, with the Limiter's default store timeout (50 ms).
func faultLimiter(t *testing.T, ctxTimeout bool) (*tollgate.Limiter, *testredis.Proxy, *redis.Client) {
	t.Helper()
	srv := testredis.Start(t)
	proxy := testredis.NewProxy(t, srv.Addr())
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: ctxTimeout})
	t.Cleanup(func() { client.Close() })
	s, err := redisstore.New(client, redisstore.WithLogger(nil), redisstore.WithPrefix(testPrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	plan := tollgate.Plan{Name: "p", Limit: tollgate.Limit{Rate: 1000, Burst: 1000}} // never denies here
	l, err := tollgate.New(s, tollgate.SinglePlan(plan), tollgate.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	return l, proxy, client
}

func eachClientSetting(t *testing.T, test func(t *testing.T, ctxTimeout bool)) {
	t.Run("default client", func(t *testing.T) { test(t, false) })
	t.Run("ContextTimeoutEnabled", func(t *testing.T) { test(t, true) })
}

// TestFaultSilentRedis: Redis stops answering under sequential traffic.
// After the breaker's threshold of decisions, each waiting the timeout,
// decisions answer at once (but for one probe per back-off), and no
// request waits longer than the timeout + 5 ms.
func TestFaultSilentRedis(t *testing.T) {
	eachClientSetting(t, func(t *testing.T, ctxTimeout bool) {
		l, proxy, _ := faultLimiter(t, ctxTimeout)
		ctx := context.Background()
		if d, err := l.Take(ctx, tollgate.Request{Tenant: "warm"}); err != nil || d.Degraded {
			t.Fatalf("before the fault: %+v, %v", d, err)
		}
		proxy.Silence()
		probe := startJitterProbe()
		var took []time.Duration
		start := time.Now()
		for time.Since(start) < 1200*time.Millisecond {
			t0 := time.Now()
			d, err := l.Take(ctx, tollgate.Request{Tenant: "t" + strconv.Itoa(len(took)%50)})
			took = append(took, time.Since(t0))
			if err != nil || !d.Degraded {
				t.Fatalf("decision %d with Redis silent: %+v, %v", len(took), d, err)
			}
			time.Sleep(200 * time.Microsecond)
		}
		jitter := probe.Stop()
		slow, fast := 0, 0
		var worst, worstFast time.Duration
		for i, d := range took {
			worst = max(worst, d)
			if i < redisstore.DefaultBreakerFailures {
				continue
			}
			if d > time.Millisecond {
				slow++ // a probe
			} else {
				fast++
				worstFast = max(worstFast, d)
			}
		}
		t.Logf("%d decisions: the first %d waited up to %v; after them %d answered within 1 ms (slowest %v), %d probes; wake-ups up to %v late",
			len(took), redisstore.DefaultBreakerFailures, worst, fast, worstFast, slow, jitter)
		// The probe samples the machine's wake-up delay; a decision may meet
		// a worse one than it saw.
		if worst > tollgate.DefaultStoreTimeout+5*time.Millisecond+2*jitter {
			t.Errorf("a decision took %v, beyond the timeout + 5 ms (+ %v of scheduling delay)", worst, jitter)
		}
		// One probe per 500 ms back-off: at most three in 1.2 s, and
		// any other slow answer is a loaded machine's, which the jitter
		// probe must have seen too.
		if slow > 3 && jitter < time.Millisecond {
			t.Errorf("%d decisions after the threshold took over 1 ms; want only the breaker's probes", slow)
		}
		for i := range redisstore.DefaultBreakerFailures {
			if took[i] < tollgate.DefaultStoreTimeout-time.Millisecond {
				t.Errorf("decision %d took %v: the breaker opened before its threshold", i, took[i])
			}
		}
	})
}

// A loadResult is one decision of an open-loop load.
type loadResult struct {
	at       time.Duration // since the load started
	took     time.Duration
	degraded bool
	err      error
}

// openLoad makes rate decisions a second for d, each from a goroutine of
// its own (an open loop: a slow answer does not slow the arrivals), over
// 200 tenants, and returns them in order of arrival.
func openLoad(l *tollgate.Limiter, rate int, d time.Duration, during func(at time.Duration)) []loadResult {
	var mu sync.Mutex
	var out []loadResult
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
			r := loadResult{at: t0.Sub(start), took: time.Since(t0), degraded: err != nil || dec.Degraded, err: dec.Err}
			mu.Lock()
			out = append(out, r)
			mu.Unlock()
		}()
		<-tick.C
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b loadResult) int { return int(a.at - b.at) })
	return out
}

func degradedShare(rs []loadResult, from, to time.Duration) (float64, int) {
	n, bad := 0, 0
	for _, r := range rs {
		if r.at >= from && r.at < to {
			n++
			if r.degraded {
				bad++
			}
		}
	}
	if n == 0 {
		return 0, 0
	}
	return float64(bad) / float64(n), n
}

// TestFaultSlowRedis: Redis answers 30 ms late (the timeout is 50 ms) at
// 500 decisions a second. At most 1 % of decisions are degraded; after a
// 300 ms hiccup (no answer at all) 150 ms in, at most 1 % again within a
// second of its end; and the store never reconnects for a caller that gave
// up.
func TestFaultSlowRedis(t *testing.T) {
	eachClientSetting(t, func(t *testing.T, ctxTimeout bool) {
		l, proxy, _ := faultLimiter(t, ctxTimeout)
		proxy.SetLatency(0, 30*time.Millisecond)
		// Connections are dialled before the measurement, as in a
		// service that has been up for a while.
		openLoad(l, 500, 300*time.Millisecond, nil)
		accepted := proxy.Accepted()
		closedBefore := accepted - proxy.Open() // Check's subscription, among others
		probe := startJitterProbe()

		steady := openLoad(l, 500, 2*time.Second, nil)
		share, n := degradedShare(steady, 0, time.Hour)
		var worst time.Duration
		for _, r := range steady {
			worst = max(worst, r.took)
		}
		t.Logf("30 ms per reply, 500/s: %d decisions, %.2f %% degraded (%s), slowest %v",
			n, 100*share, causes(steady), worst)

		const hiccupAt, hiccup, length = 150 * time.Millisecond, 300 * time.Millisecond, 2500 * time.Millisecond
		silenced, resumed := false, false
		rs := openLoad(l, 500, length, func(at time.Duration) {
			if !silenced && at >= hiccupAt {
				proxy.Silence()
				silenced = true
			}
			if !resumed && at >= hiccupAt+hiccup {
				proxy.Resume()
				resumed = true
			}
		})
		jitter := probe.Stop()
		end := hiccupAt + hiccup
		// Recovered: from then to the end of the run, at most 1 % degraded.
		recovered := time.Duration(-1)
		for w := end; w < length-500*time.Millisecond; w += 10 * time.Millisecond {
			if s, _ := degradedShare(rs, w, length); s <= 0.01 {
				recovered = w - end
				break
			}
		}
		during, _ := degradedShare(rs, hiccupAt, end)
		after, _ := degradedShare(rs, end+time.Second, length)
		t.Logf("hiccup of %v at %v: %.0f %% degraded during it; at most 1 %% from %v after its end on (%.2f %% from 1 s on: %s); %d connections dialled, %d closed; wake-ups up to %v late",
			hiccup, hiccupAt, 100*during, recovered, 100*after, causes(rs), proxy.Accepted()-accepted, proxy.Accepted()-proxy.Open()-closedBefore, jitter)
		// A caller that gives up costs no connection: no connection the
		// client opened was closed (the pool grows only to carry round trips
		// in flight).
		if closed := proxy.Accepted() - proxy.Open() - closedBefore; closed > 0 {
			t.Errorf("%d connections closed under latency: callers giving up closed connections", closed)
		}
		// The 1 % targets leave 20 ms of the timeout to the machine: a
		// test process woken 15 ms late misses deadlines that the store
		// would have met. On such a machine only the store's own share is
		// asserted, the decisions denied by an open breaker, and the
		// figures are logged either way.
		if jitter > 10*time.Millisecond {
			t.Logf("the machine woke goroutines up to %v late: asserting only that the breaker stays closed", jitter)
			if open := breakerShare(steady); open > 0.01 {
				t.Errorf("%.2f %% of decisions failed on an open breaker with Redis 30 ms away", 100*open)
			}
			if open := breakerShare(rs[len(rs)/2:]); open > 0.01 {
				t.Errorf("%.2f %% of decisions failed on an open breaker over a second after the hiccup", 100*open)
			}
			return
		}
		if share > 0.01 {
			t.Errorf("%.2f %% of decisions degraded with Redis 30 ms away and a 50 ms timeout; want at most 1 %%", 100*share)
		}
		if after > 0.01 {
			t.Errorf("%.2f %% of decisions degraded from 1 s after the hiccup on; want at most 1 %%", 100*after)
		}
	})
}

// breakerShare is the share of decisions failed by an open breaker.
func breakerShare(rs []loadResult) float64 {
	n := 0
	for _, r := range rs {
		if r.degraded && errors.Is(r.err, redisstore.ErrCircuitOpen) {
			n++
		}
	}
	return float64(n) / float64(max(len(rs), 1))
}

// causes counts the degraded decisions by cause.
func causes(rs []loadResult) string {
	open, timeout, other := 0, 0, 0
	for _, r := range rs {
		switch {
		case !r.degraded:
		case errors.Is(r.err, redisstore.ErrCircuitOpen):
			open++
		case errors.Is(r.err, redisstore.ErrUnavailable):
			timeout++
		default:
			other++
		}
	}
	return fmt.Sprintf("%d with the breaker open, %d timed out, %d other", open, timeout, other)
}

// TestAbandonedOpReused gives up on Ops whose round trips are slow and
// reuses each Op at once for another request, as the Limiter does with its
// pool: the store must neither read nor write an Op it no longer owns (the
// race detector watches), and the requests it then answers are unharmed.
func TestAbandonedOpReused(t *testing.T) {
	srv := testredis.Start(t)
	proxy := testredis.NewProxy(t, srv.Addr())
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	defer client.Close()
	s := newStore(t, client, redisstore.WithPrefix(testPrefix(t)), redisstore.WithCircuitBreaker(0, 0))
	proxy.SetLatency(0, 20*time.Millisecond)
	one := []tollgate.Rule{{Limit: tollgate.Limit{Rate: 1000, Burst: 1000}}}
	three := []tollgate.Rule{{Limit: tollgate.Limit{Rate: 1000, Burst: 1000}},
		{Sub: "day", Quota: tollgate.PerDay(1e6)}, {Sub: "b:x", Limit: tollgate.Limit{Rate: 1000, Burst: 1000}}}
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			op := &tollgate.Op{}
			for i := range 20 {
				*op = tollgate.Op{Kind: tollgate.OpTake, Key: "t" + strconv.Itoa(w), Rules: one, Cost: 1,
					Deadline: time.Now().Add(5 * time.Millisecond), Results: op.Results[:0], Marks: op.Marks[:0]}
				if err := s.Do(context.Background(), op); !errors.Is(err, redisstore.ErrUnavailable) {
					t.Errorf("a call with a 5 ms deadline to a Redis 20 ms away: %v", err)
					return
				}
				// Reused at once, with other rules and another tenant.
				*op = tollgate.Op{Kind: tollgate.OpInspect, Key: "other" + strconv.Itoa(i), Rules: three, Cost: 2,
					Results: op.Results[:0], Marks: op.Marks[:0]}
				for j := range 3 {
					op.Results = append(op.Results, tollgate.Result{Remaining: int64(j)})
				}
			}
		}()
	}
	wg.Wait()
	// The late answers have come back by now; the store decides as ever.
	time.Sleep(50 * time.Millisecond)
	proxy.SetLatency(0, 0)
	op := &tollgate.Op{Kind: tollgate.OpTake, Key: "after", Rules: three, Cost: 1, Deadline: time.Now().Add(5 * time.Second)}
	if err := s.Do(context.Background(), op); err != nil || !op.Allowed || op.Results[1].Remaining != 1e6-1 {
		t.Fatalf("after the abandoned calls: %+v, %v", op, err)
	}
}
