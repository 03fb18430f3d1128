package redisstore_test

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/redisstore"
	"github.com/tollgate-go/tollgate/core/storetest"
)

// runAccuracy has 64 goroutines, spread over one Store per client, hammer
// one tenant for d on the server's real clock. The tokens allowed must never
// exceed Burst + Rate x elapsed and must fall short of it by at most 10%.
func runAccuracy(t *testing.T, clients []redis.UniversalClient, d time.Duration) {
	const workers = 64
	limit := tollgate.Limit{Rate: 400, Burst: 100} // within what a loaded two-core machine serves under -race
	prefix := testPrefix(t)
	var stores []*redisstore.Store
	for _, c := range clients {
		// The timeout is generous: this test is about counting.
		stores = append(stores, newStore(t, c, redisstore.WithPrefix(prefix)))
	}
	var allowed, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	var mu sync.Mutex
	var lastAllowed time.Time // when the last allowed Take returned
	ready := make(chan struct{})
	start := time.Now()
	deadline := start.Add(d)
	for w := range workers {
		s := stores[w%len(stores)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last time.Time
			defer func() {
				mu.Lock()
				if last.After(lastAllowed) {
					lastAllowed = last
				}
				mu.Unlock()
			}()
			<-ready
			for time.Now().Before(deadline) {
				r, err := s.Take(bg, "tenant", limit, 1)
				switch {
				case err != nil:
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				case r.Allowed:
					allowed.Add(1)
					last = time.Now()
				}
			}
		}()
	}
	start = time.Now()
	close(ready)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d Takes failed, the first with %v", n, firstErr.Load())
	}
	// Every allowed decision was made between start and lastAllowed, so
	// the bucket can have given no more than Burst + Rate x that.
	elapsed := lastAllowed.Sub(start)
	ceiling := float64(limit.Burst) + limit.Rate*elapsed.Seconds()
	got := float64(allowed.Load())
	t.Logf("%d stores, %d goroutines, %v: allowed %.0f of a possible %.0f (%.2f%%)",
		len(stores), workers, elapsed.Round(time.Millisecond), got, ceiling, 100*got/ceiling)
	if got > ceiling {
		t.Fatalf("allowed %.0f tokens in %v; Burst + Rate x elapsed is %.0f", got, elapsed, ceiling)
	}
	// Falling short only means a loaded machine did not ask often enough;
	// 10 % short would mean lost tokens.
	if got < 0.90*ceiling {
		t.Fatalf("allowed only %.0f tokens in %v, more than 10%% short of %.0f", got, elapsed, ceiling)
	}
}

func TestAccuracy(t *testing.T) {
	var clients []redis.UniversalClient
	for i := range 4 {
		// Half the clients honour context deadlines, so idle Takes make
		// their own round trips.
		c := redis.NewClient(&redis.Options{Addr: mainRedis, ContextTimeoutEnabled: i%2 == 1})
		t.Cleanup(func() { c.Close() })
		clients = append(clients, c)
	}
	runAccuracy(t, clients, 3*time.Second)
}

// TestManyTenantsExact takes from a thousand buckets at once, so batches
// carry many keys, some of them repeated: each bucket must still allow
// exactly its burst with the clock stopped.
func TestManyTenantsExact(t *testing.T) {
	runManyTenants(t, newClient(t))
}

func runManyTenants(t *testing.T, client redis.UniversalClient) {
	const tenants, workers, rounds = 1000, 64, 4
	limit := tollgate.Limit{Rate: 1, Burst: 3}
	clock := storetest.NewClock()
	s := newStore(t, client, redisstore.WithPrefix(testPrefix(t)), redisstore.WithTestClock(clock.Now),
		redisstore.WithDenialCache(0))
	var allowed [tenants]atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range tenants * rounds / workers * 2 {
				k := (w*7919 + i*31) % tenants
				r, err := s.Take(bg, "tenant-"+strconv.Itoa(k), limit, 1)
				if err != nil {
					errs <- err
					return
				}
				if r.Allowed {
					allowed[k].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for k := range allowed {
		if n := allowed[k].Load(); n != limit.Burst {
			t.Fatalf("tenant %d: allowed %d, want exactly Burst = %d", k, n, limit.Burst)
		}
	}
}

// TestCoalescing checks that concurrent Takes share round trips, and that a
// Take alone goes out at once, in a round trip of its own.
func TestCoalescing(t *testing.T) {
	t.Run("default client", func(t *testing.T) { testCoalescing(t, false) })
	t.Run("ContextTimeoutEnabled", func(t *testing.T) { testCoalescing(t, true) })
}

func testCoalescing(t *testing.T, ctxTimeout bool) {
	client := redis.NewClient(&redis.Options{Addr: mainRedis, ContextTimeoutEnabled: ctxTimeout})
	t.Cleanup(func() { client.Close() })
	h := &countHook{}
	client.AddHook(h)
	s := newStore(t, client, redisstore.WithPrefix(testPrefix(t)))
	limit := tollgate.Limit{Rate: 1e5, Burst: 1e6} // never denies: every Take goes to Redis

	const workers, each = 64, 40
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if r, err := s.Take(bg, "tenant-"+strconv.Itoa(w), limit, 1); err != nil || !r.Allowed {
					t.Errorf("Take: %+v, %v", r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	takes, trips := int64(workers*each), h.roundTrips.Load()
	t.Logf("%d concurrent Takes in %d round trips (%d script calls)", takes, trips, h.scripts.Load())
	if trips > takes/4 {
		t.Fatalf("%d concurrent Takes took %d round trips; they should share them", takes, trips)
	}

	h.roundTrips.Store(0)
	// A Take alone is sent at once: the batcher has no timer to wait for
	// company, so each serial Take is a round trip of its own.
	for range 50 {
		if _, err := s.Take(bg, "serial", limit, 1); err != nil {
			t.Fatal(err)
		}
	}
	if n := h.roundTrips.Load(); n != 50 {
		t.Fatalf("50 serial Takes made %d round trips, want one each", n)
	}
}

// TestDenialCache checks that a bucket Redis reported empty is denied
// locally, with exactly the answer Redis gives, and only while Redis would
// deny.
func TestDenialCache(t *testing.T) {
	prefix := testPrefix(t)
	clock := storetest.NewClock()
	cached, direct := newClient(t), newClient(t)
	h := &countHook{}
	cached.AddHook(h)
	a := newStore(t, cached, redisstore.WithPrefix(prefix), redisstore.WithTestClock(clock.Now))
	b := newStore(t, direct, redisstore.WithPrefix(prefix), redisstore.WithTestClock(clock.Now), redisstore.WithDenialCache(0))
	free := tollgate.Limit{Rate: 2, Burst: 5}
	other := tollgate.Limit{Rate: 4, Burst: 5} // a plan the bucket is empty under too
	take := func(s *redisstore.Store, limit tollgate.Limit, cost int64) tollgate.Result {
		t.Helper()
		r, err := s.Take(bg, "tenant", limit, cost)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	if r := take(a, free, 5); !r.Allowed {
		t.Fatalf("first Take denied: %+v", r)
	}
	// The cache answers once the Store listens for resets; it forgets
	// what it learned before, so one more denial comes from Redis.
	waitListening(t, a)
	if r := take(a, free, 1); r.Allowed {
		t.Fatalf("second Take allowed: %+v", r)
	}
	trips := h.decisions.Load()
	// For the next 500ms the bucket holds less than a token: every answer
	// comes from the cache and equals Redis's own.
	for range 499 {
		clock.Advance(time.Millisecond)
		got, want := take(a, free, 1), take(b, free, 1)
		if got != want {
			t.Fatalf("at %v the cache answered %+v, Redis %+v", clock.Now(), got, want)
		}
	}
	if n := h.decisions.Load() - trips; n != 0 {
		t.Fatalf("denials of an empty bucket made %d script calls, want 0", n)
	}
	// A plan change is not answered from an entry made under another limit.
	got, want := take(a, other, 1), take(b, other, 1)
	if got.Allowed || got != want || h.decisions.Load() != trips+1 {
		t.Fatalf("under a new limit: cache %+v, Redis %+v, %d script calls", got, want, h.decisions.Load()-trips)
	}
	// The moment a token is back, the request goes to Redis and is allowed.
	clock.Advance(time.Millisecond)
	if r := take(a, free, 1); !r.Allowed {
		t.Fatalf("a token is back but the Take was denied: %+v", r)
	}
	// A denial for a large cost does not deny a small one that fits.
	clock.Advance(1500 * time.Millisecond) // 3 tokens
	if r := take(a, free, 5); r.Allowed || r.Remaining != 3 {
		t.Fatalf("cost 5 with 3 tokens: %+v", r)
	}
	if r := take(a, free, 3); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("cost 3 with 3 tokens: %+v", r)
	}
	// Another replica taking tokens only lengthens a cached denial: the
	// cache still denies, and Redis agrees.
	clock.Advance(500 * time.Millisecond)
	if r := take(b, free, 1); !r.Allowed {
		t.Fatalf("the other replica: %+v", r)
	}
	if got, want := take(a, free, 1), take(b, free, 1); got.Allowed || want.Allowed {
		t.Fatalf("after the other replica took the token: cache %+v, Redis %+v", got, want)
	}
}

func TestDenialCacheFlood(t *testing.T) {
	client := newClient(t)
	h := &countHook{}
	client.AddHook(h)
	s := newStore(t, client, redisstore.WithPrefix(testPrefix(t)))
	limit := tollgate.Limit{Rate: 1, Burst: 1}
	var allowed, denied atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	// The first request is allowed; the cache answers once the Store
	// listens for resets.
	if r, err := s.Take(bg, "looping-tenant", limit, 1); err != nil || !r.Allowed {
		t.Fatalf("first Take: %+v, %v", r, err)
	}
	allowed.Add(1)
	if r, err := s.Take(bg, "looping-tenant", limit, 1); err != nil || r.Allowed {
		t.Fatalf("second Take: %+v, %v", r, err)
	}
	waitListening(t, s)
	h.decisions.Store(0)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				r, err := s.Take(bg, "looping-tenant", limit, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if r.Allowed {
					allowed.Add(1)
				} else {
					denied.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	// One round trip for the first request, one batch for the requests
	// that queued behind it, and one per refill (a token a second).
	maxTrips := int64(2 + 2*elapsed.Seconds() + 1)
	t.Logf("%d allowed, %d denied in %v with %d script calls", allowed.Load(), denied.Load(), elapsed, h.decisions.Load())
	if n := h.decisions.Load(); n > maxTrips {
		t.Fatalf("a flood of %d requests cost %d script calls in %v, want at most %d", 16*2000, n, elapsed, maxTrips)
	}
	if n := allowed.Load(); float64(n) > 1+elapsed.Seconds()+1 {
		t.Fatalf("allowed %d in %v under 1/s with a burst of 1", n, elapsed)
	}
}

func TestDenialCacheBounded(t *testing.T) {
	client := newClient(t)
	clock := storetest.NewClock()
	s := newStore(t, client, redisstore.WithPrefix(testPrefix(t)), redisstore.WithTestClock(clock.Now),
		redisstore.WithDenialCache(128))
	limit := tollgate.Limit{Rate: 1, Burst: 1}
	for i := range 1000 {
		if r, err := s.Take(bg, "tenant-"+strconv.Itoa(i), limit, 1); err != nil || !r.Allowed {
			t.Fatalf("Take: %+v, %v", r, err)
		}
		if n := s.CachedDenials(); n > 128 {
			t.Fatalf("the cache holds %d buckets, over its bound of 128", n)
		}
	}
	if n := s.CachedDenials(); n < 64 {
		t.Fatalf("the cache holds only %d of 1000 empty buckets", n)
	}
}

// TestTTLHygiene checks that every key carries a TTL that ends when its
// bucket is full again, that denials write nothing, and that all keys are
// gone once traffic has stopped for a full window.
func TestTTLHygiene(t *testing.T) {
	client := newClient(t)
	prefix := testPrefix(t)
	// Every Take reaches Redis.
	s := newStore(t, client, redisstore.WithPrefix(prefix), redisstore.WithDenialCache(0))
	limits := []tollgate.Limit{
		{Rate: 12.5, Burst: 10}, // 800ms to refill
		{Rate: 25, Burst: 5},    // 200ms
		{Rate: 5, Burst: 6},     // 1200ms: long enough for a loaded machine's SCAN
	}
	const tenants = 30
	var wg sync.WaitGroup
	stop := time.Now().Add(300 * time.Millisecond)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; time.Now().Before(stop); i++ {
				k := i % tenants
				if _, err := s.Take(bg, "tenant-"+strconv.Itoa(k), limits[k%3], 1+int64(i%2)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()

	keys := scanKeys(t, client, prefix)
	if len(keys) == 0 {
		t.Fatal("no keys after traffic")
	}
	for _, k := range keys {
		pttl, err := client.PTTL(bg, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if pttl == -2*time.Nanosecond || pttl == -2*time.Millisecond {
			continue // expired meanwhile
		}
		// 0 is a key with less than a millisecond to live; -1 one without
		// a TTL.
		if pttl < 0 || pttl > 1203*time.Millisecond {
			t.Fatalf("key %s has TTL %v, want one within the longest window (1200ms)", k, pttl)
		}
		// The TTL ends when the bucket is full: at the stored TAT, which
		// the key holds. MULTI reads the three at one instant.
		var ttlCmd *redis.DurationCmd
		var getCmd *redis.StringCmd
		var timeCmd *redis.TimeCmd
		if _, err := client.TxPipelined(bg, func(p redis.Pipeliner) error {
			ttlCmd, getCmd, timeCmd = p.PTTL(bg, k), p.Get(bg, k), p.Time(bg)
			return nil
		}); err != nil {
			continue // expired meanwhile
		}
		tat, _ := getCmd.Int64()
		full := time.Duration(tat-timeCmd.Val().UnixMicro()) * time.Microsecond
		// The key outlives its bucket by at most 2ms, and PTTL, counted
		// from a clock truncated to the millisecond, reads up to 1ms more;
		// a loaded server's PTTL and TIME may be another 2ms apart.
		if d := ttlCmd.Val() - full; d < 0 || d > 5*time.Millisecond {
			t.Fatalf("key %s expires in %v but its bucket is full in %v", k, ttlCmd.Val(), full)
		}
	}
	time.Sleep(1250 * time.Millisecond)
	if keys := scanKeys(t, client, prefix); len(keys) != 0 {
		t.Fatalf("%d keys outlived their buckets' refill, e.g. %s", len(keys), keys[0])
	}

	// Denials write nothing: neither the value nor the TTL moves.
	limit := tollgate.Limit{Rate: 1, Burst: 5}
	if r, err := s.Take(bg, "denied", limit, 5); err != nil || !r.Allowed {
		t.Fatalf("Take: %+v, %v", r, err)
	}
	rkey := redisstore.RedisKey(prefix, "denied")
	before, _ := client.Get(bg, rkey).Result()
	ttl1, _ := client.PTTL(bg, rkey).Result()
	for range 50 {
		if r, err := s.Take(bg, "denied", limit, 1); err != nil || r.Allowed {
			t.Fatalf("Take of an empty bucket: %+v, %v", r, err)
		}
	}
	after, _ := client.Get(bg, rkey).Result()
	ttl2, _ := client.PTTL(bg, rkey).Result()
	if before != after || ttl2 > ttl1 {
		t.Fatalf("denials wrote: value %s -> %s, TTL %v -> %v", before, after, ttl1, ttl2)
	}
}

// TestClockSkew runs two replicas whose clocks are two hours apart against
// one bucket: they must make the decisions a single replica makes, because
// only Redis's clock decides.
func TestClockSkew(t *testing.T) {
	prefix := testPrefix(t)
	behind := func() time.Time { return time.Now().Add(-time.Hour).Round(0) }
	ahead := func() time.Time { return time.Now().Add(time.Hour).Round(0) }
	a := newStore(t, newClient(t), redisstore.WithPrefix(prefix), redisstore.WithLocalClock(behind))
	b := newStore(t, newClient(t), redisstore.WithPrefix(prefix), redisstore.WithLocalClock(ahead))
	single := newStore(t, newClient(t), redisstore.WithPrefix(prefix))
	limit := tollgate.Limit{Rate: 5, Burst: 5} // a token every 200ms

	type decision struct {
		allowed   bool
		remaining int64
	}
	run := func(key string, stores ...*redisstore.Store) []decision {
		var ds []decision
		for i := range 8 {
			r, err := stores[i%len(stores)].Take(bg, key, limit, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !r.Allowed && (r.RetryAfter <= 0 || r.RetryAfter > 200*time.Millisecond) {
				t.Fatalf("take %d: RetryAfter %v, want within one token's 200ms", i, r.RetryAfter)
			}
			ds = append(ds, decision{r.Allowed, r.Remaining})
		}
		return ds
	}
	skewed := run("skewed", a, b)
	want := run("reference", single)
	if fmt.Sprint(skewed) != fmt.Sprint(want) {
		t.Fatalf("skewed replicas decided %v, a single replica %v", skewed, want)
	}
	// The stored state is on Redis's clock, not an hour either way.
	tat, err := single.Take(bg, "skewed", limit, 1)
	if err != nil || tat.Allowed {
		t.Fatalf("Take: %+v, %v", tat, err)
	}
	client := newClient(t)
	stored, _ := client.Get(bg, redisstore.RedisKey(prefix, "skewed")).Int64()
	now, _ := client.Time(bg).Result()
	if d := time.Duration(stored-now.UnixMicro()) * time.Microsecond; d < 0 || d > time.Second {
		t.Fatalf("stored TAT is %v from the server's now; want within the 1s window", d)
	}
	// Both replicas see the refill at the same moment.
	time.Sleep(limit.Window())
	ra, errA := a.Take(bg, "skewed", limit, 1)
	rb, errB := b.Take(bg, "skewed", limit, 1)
	if errA != nil || errB != nil || !ra.Allowed || !rb.Allowed {
		t.Fatalf("after a full refill: %+v %v, %+v %v", ra, errA, rb, errB)
	}
}

func TestDividedStore(t *testing.T) {
	clock := storetest.NewClock()
	d := redisstore.DividedStore{Store: memory.New(memory.WithClock(clock.Now)), Replicas: 4}
	limit := tollgate.Limit{Rate: 8, Burst: 20} // 2/s and 5 per replica
	r, err := d.Take(bg, "t", limit, 5)
	if err != nil || r != (tollgate.Result{Allowed: true, Remaining: 0, ResetAfter: 2500 * time.Millisecond}) {
		t.Fatalf("cost 5 of a divided burst of 5: %+v, %v", r, err)
	}
	r, err = d.Take(bg, "t", limit, 1)
	if err != nil || r.Allowed || r.RetryAfter != 500*time.Millisecond {
		t.Fatalf("then cost 1 at the divided rate of 2/s: %+v, %v", r, err)
	}
	// A request larger than the divided burst but valid under the real
	// limit is decided under a burst of its own cost.
	r, err = d.Take(bg, "big", limit, 10)
	if err != nil || !r.Allowed || r.Remaining != 0 {
		t.Fatalf("cost 10 over a divided burst of 5: %+v, %v", r, err)
	}
	// Invalid input is reported as any Store reports it.
	if _, err := d.Take(bg, "t", tollgate.Limit{Rate: 0, Burst: 1}, 1); !errors.Is(err, tollgate.ErrInvalidLimit) {
		t.Fatalf("invalid limit: %v", err)
	}
	if _, err := d.Take(bg, "t", limit, 21); !errors.Is(err, tollgate.ErrCostExceedsBurst) {
		t.Fatalf("cost over the real burst: %v", err)
	}
	// The Limiter's headers describe the divided bucket.
	if got, want := d.LimitFor(limit, 1), (tollgate.Limit{Rate: 2, Burst: 5}); got != want {
		t.Fatalf("LimitFor(cost 1) = %v, want %v", got, want)
	}
	if got, want := d.LimitFor(limit, 10), (tollgate.Limit{Rate: 2, Burst: 10}); got != want {
		t.Fatalf("LimitFor(cost 10) = %v, want %v", got, want)
	}
	// Without a Store, or with a nil one, it reports a misconfiguration
	// rather than panic.
	var nilStore *memory.Store
	for _, bad := range []redisstore.DividedStore{{}, {Store: nilStore}} {
		if err := bad.Check(bg); !errors.Is(err, tollgate.ErrMisconfigured) {
			t.Fatalf("Check of %+v: %v, want ErrMisconfigured", bad, err)
		}
		if _, err := bad.Take(bg, "t", limit, 1); !errors.Is(err, tollgate.ErrMisconfigured) {
			t.Fatalf("Take of %+v: %v, want ErrMisconfigured", bad, err)
		}
		if err := bad.Do(bg, &tollgate.Op{Key: "t", Rules: []tollgate.Rule{{Limit: limit}}, Cost: 1}); !errors.Is(err, tollgate.ErrMisconfigured) {
			t.Fatalf("Do of %+v: %v, want ErrMisconfigured", bad, err)
		}
	}
	// Over a MultiStore every rule is divided, quotas included.
	rs := newStore(t, newClient(t), redisstore.WithPrefix(testPrefix(t)), redisstore.WithTestClock(clock.Now))
	multi := redisstore.DividedStore{Store: rs, Replicas: 4}
	if err := multi.Check(bg); err != nil {
		t.Fatalf("Check over a Redis store: %v", err)
	}
	rules := []tollgate.Rule{{Limit: limit}, {Sub: "day", Quota: tollgate.PerDay(10)}} // 5 and 3 per replica
	for i := range 4 {
		op := &tollgate.Op{Kind: tollgate.OpTake, Key: "q", Rules: rules, Cost: 1}
		if err := multi.Do(bg, op); err != nil {
			t.Fatal(err)
		}
		if want := i < 3; op.Allowed != want || op.Results[1].Remaining != max(2-int64(i), 0) {
			t.Fatalf("take %d: allowed %v, %+v; want %v under a divided quota of 3", i, op.Allowed, op.Results, want)
		}
		if &op.Rules[0] != &rules[0] {
			t.Fatal("Do did not give the caller's rules back")
		}
	}
	// Over a plain Store, a one-bucket take still works.
	op := &tollgate.Op{Kind: tollgate.OpTake, Key: "plain", Rules: []tollgate.Rule{{Limit: limit}}, Cost: 5}
	if err := d.Do(bg, op); err != nil || !op.Allowed || op.Results[0].Remaining != 0 {
		t.Fatalf("a one-bucket Op over memory: %+v, %v", op, err)
	}
	// Replicas < 1 divides nothing.
	one := redisstore.DividedStore{Store: memory.New(memory.WithClock(clock.Now))}
	if r, err := one.Take(bg, "t", limit, 20); err != nil || !r.Allowed {
		t.Fatalf("undivided: %+v, %v", r, err)
	}
}

// TestFallback runs a Limiter whose Redis is gone, with a divided memory
// store as its fallback: decisions come at once, from the fallback, at the
// divided limit.
func TestFallback(t *testing.T) {
	// Nothing listens on a port just released by the test.
	client := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", freePort(t)), MaxRetries: -1})
	defer client.Close()
	clock := storetest.NewClock()
	s := newStore(t, client, redisstore.WithPrefix(testPrefix(t)))
	fb := redisstore.DividedStore{Store: memory.New(memory.WithClock(clock.Now)), Replicas: 2}
	plan := tollgate.Plan{Name: "p", Limit: tollgate.Limit{Rate: 10, Burst: 10}}
	l, err := tollgate.New(s, tollgate.SinglePlan(plan), tollgate.WithFallbackStore(fb), tollgate.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		d, err := l.Take(bg, tollgate.Request{Tenant: "t"})
		if err != nil {
			t.Fatalf("take %d: %v", i, err)
		}
		if !d.Degraded || !errors.Is(d.Err, redisstore.ErrUnavailable) || !d.HasFigures() {
			t.Fatalf("take %d: want a degraded decision with figures from the fallback, got %+v", i, d)
		}
		if want := i < 5; d.Allowed != want {
			t.Fatalf("take %d: allowed %v, want %v (the fallback's burst is 5)", i, d.Allowed, want)
		}
	}
	// Invalid input is still an error, not a fallback decision.
	if _, err := s.Take(bg, "t", plan.Limit, 11); !errors.Is(err, tollgate.ErrCostExceedsBurst) {
		t.Fatalf("cost over burst: %v", err)
	}
	// The store's own error says why.
	if _, err := s.Take(bg, "t", plan.Limit, 1); !errors.Is(err, redisstore.ErrUnavailable) {
		t.Fatalf("store error: %v, want ErrUnavailable", err)
	}
}

// TestHugeNumbers takes from a bucket whose window is close to
// tollgate.MaxWindow, so the stored TAT is near the largest the script
// handles: it must come back exact, and decisions must match GCRA's to the
// microsecond.
func TestHugeNumbers(t *testing.T) {
	client := newClient(t)
	prefix := testPrefix(t)
	s := newStore(t, client, redisstore.WithPrefix(prefix), redisstore.WithDenialCache(0))
	// One token every 11.5 days, 3,000 of them: a 94-year window.
	limit := tollgate.Limit{Rate: 1e-6, Burst: 3000}
	if err := limit.Validate(); err != nil {
		t.Fatal(err)
	}
	r, err := s.Take(bg, "t", limit, 2999)
	if err != nil || !r.Allowed || r.Remaining != 1 {
		t.Fatalf("Take: %+v, %v", r, err)
	}
	stored, err := client.Get(bg, redisstore.RedisKey(prefix, "t")).Result()
	if err != nil {
		t.Fatal(err)
	}
	tat, err := strconv.ParseInt(stored, 10, 64)
	if err != nil || tat < 4e15 {
		t.Fatalf("stored TAT %q is not an exact integer near 4.7e15 (%v)", stored, err)
	}
	now, _ := client.Time(bg).Result()
	r, err = s.Take(bg, "t", limit, 2)
	// The TAT is 2999 intervals ahead of the write: cost 2 needs one more
	// interval than the tolerance leaves, less the time since.
	if err != nil || r.Allowed || r.Remaining != 1 {
		t.Fatalf("Take of 2: %+v, %v", r, err)
	}
	rel := tat - now.UnixMicro()
	want := time.Duration(2*limit.TokenInterval()-(limit.Burst*limit.TokenInterval()-rel)) * time.Microsecond
	if d := r.RetryAfter - want; d < -time.Second || d > time.Second {
		t.Fatalf("RetryAfter %v, want about %v", r.RetryAfter, want)
	}
}

// TestQuotaPeriodOnRedisClock runs replicas whose clocks put them in the day
// before and the day after Redis's: each passes the key of its own day, and
// the script counts in Redis's day, whose key it derives, and resets it.
func TestQuotaPeriodOnRedisClock(t *testing.T) {
	client := newClient(t)
	now, err := client.Time(bg).Result()
	if err != nil {
		t.Fatal(err)
	}
	day := now.UTC().Truncate(24 * time.Hour)
	if now.Sub(day) < time.Minute || day.Add(24*time.Hour).Sub(now) < time.Minute {
		t.Skip("too close to midnight UTC")
	}
	prefix := testPrefix(t)
	fixed := func(t time.Time) func() time.Time { return func() time.Time { return t } }
	before := newStore(t, newClient(t), redisstore.WithPrefix(prefix), redisstore.WithWallClock(fixed(day.Add(-time.Hour))))
	after := newStore(t, newClient(t), redisstore.WithPrefix(prefix), redisstore.WithWallClock(fixed(day.Add(25*time.Hour))))
	single := newStore(t, newClient(t), redisstore.WithPrefix(prefix))
	rules := []tollgate.Rule{{Sub: "day", Quota: tollgate.PerDay(5)}}
	do := func(s *redisstore.Store, kind tollgate.OpKind, cost int64) *tollgate.Op {
		t.Helper()
		op := &tollgate.Op{Kind: kind, Key: "skewed", Rules: rules, Cost: cost}
		if err := s.Do(bg, op); err != nil {
			t.Fatalf("%v: %v", kind, err)
		}
		return op
	}
	if op := do(before, tollgate.OpTake, 3); !op.Allowed || op.Results[0].Remaining != 2 {
		t.Fatalf("3 from the replica a day behind: %+v", op)
	}
	if op := do(after, tollgate.OpTake, 2); !op.Allowed || op.Results[0].Remaining != 0 {
		t.Fatalf("2 from the replica a day ahead: %+v", op)
	}
	if op := do(single, tollgate.OpTake, 1); op.Allowed {
		t.Fatalf("a 6th token in one of Redis's days: %+v", op)
	}
	key := redisstore.RedisKey(prefix, "skewed") + ":day:" + strconv.FormatInt(day.Unix(), 10)
	if used, err := client.Get(bg, key).Int64(); err != nil || used != 5 {
		t.Fatalf("%s holds %d, %v; want the 5 tokens of Redis's day", key, used, err)
	}
	do(after, tollgate.OpReset, 1)
	if n, _ := client.Exists(bg, key).Result(); n != 0 {
		t.Fatalf("%s survived a reset from the replica a day ahead", key)
	}
	if op := do(single, tollgate.OpTake, 5); !op.Allowed {
		t.Fatalf("after the reset: %+v", op)
	}
}
