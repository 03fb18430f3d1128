package storetest

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/storekit"
)

// concurrencyWorkers is how many goroutines the concurrency checks run,
// spread over the stores they are given.
const concurrencyWorkers = 64

// RunConcurrency hammers tenants from 64 goroutines spread over stores,
// which share one backend and clock (replicas of one service); stores over
// a backend of their own must be passed one at a time. Takes of one bucket
// on a stopped clock allow exactly the burst, and with the clock moving
// never more than Burst + Rate x elapsed. Ops on several rules allow
// exactly as many requests as the tightest rule lets through, and
// afterwards every rule holds exactly what the allowed requests took (a
// denied request spent from none); reservations made all at once each get
// a slot of their own; with the clock moving, no rule is ever exceeded.
// Last, RunInFlight makes 2,000 requests run under a cap on requests in
// flight.
func RunConcurrency(t *testing.T, stores []tollgate.Store, clock *Clock) {
	t.Run("Take, stopped clock", func(t *testing.T) { runTakeStopped(t, stores) })
	t.Run("Take, moving clock", func(t *testing.T) { runTakeMoving(t, stores, clock) })
	t.Run("Ops, stopped clock, quota tightest", func(t *testing.T) {
		rules := []storekit.Rule{bucketRule("", 100, 50), quotaRule("day", daily(40, nil)), bucketRule("b:x", 1000, 1000)}
		if got, _ := runOpsHammer(t, stores, clock, rules, 20, 0); got != 40 {
			t.Fatalf("allowed %d, want exactly the quota's 40", got)
		}
	})
	t.Run("Ops, stopped clock, bucket tightest", func(t *testing.T) {
		rules := []storekit.Rule{bucketRule("", 100, 50), quotaRule("day", daily(1000, nil)), bucketRule("b:x", 1, 70)}
		if got, _ := runOpsHammer(t, stores, clock, rules, 20, 0); got != 50 {
			t.Fatalf("allowed %d, want exactly the burst of 50", got)
		}
	})
	t.Run("Ops, stopped clock, reservations", func(t *testing.T) { runReservations(t, stores) })
	t.Run("Ops, moving clock", func(t *testing.T) {
		rules := []storekit.Rule{bucketRule("", 100, 20), quotaRule("day", daily(150, nil)), bucketRule("b:x", 60, 40)}
		got, elapsed := runOpsHammer(t, stores, clock, rules, 200, 10*ms)
		// 2s: the budget's bucket allows 40 + 60 x 2 = 160, the quota 150.
		ceiling := min(int64(150), 40+int64(60*elapsed.Seconds()), 20+int64(100*elapsed.Seconds()))
		if got > ceiling {
			t.Fatalf("allowed %d in %v; the tightest limit allows %d", got, elapsed, ceiling)
		}
		if got < ceiling*9/10 {
			t.Fatalf("allowed only %d in %v, want nearly %d", got, elapsed, ceiling)
		}
		t.Logf("allowed %d of a possible %d", got, ceiling)
	})
	t.Run("in flight", func(t *testing.T) { RunInFlight(t, stores, clock, 2000) })
}

// runTakeStopped has the workers take a token each 20 times from one
// bucket of 50 on a stopped clock: exactly 50 are allowed.
func runTakeStopped(t *testing.T, stores []tollgate.Store) {
	limit := tollgate.Limit{Rate: 100, Burst: 50}
	key := tenant(t, stores[0], "k")
	var allowed, failed atomic.Int64
	var wg sync.WaitGroup
	for w := range concurrencyWorkers {
		tk := takerOf(t, stores[w%len(stores)])
		wg.Go(func() {
			for range 20 {
				r, err := tk.Take(ctx(), key, limit, 1)
				switch {
				case err != nil:
					failed.Add(1)
				case r.Allowed:
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d Takes failed", failed.Load())
	}
	if got := allowed.Load(); got != limit.Burst {
		t.Fatalf("allowed %d of %d requests with the clock stopped, want exactly Burst = %d",
			got, concurrencyWorkers*20, limit.Burst)
	}
}

// runTakeMoving moves the clock 4ms at a time for 2s of store time, with
// 32 concurrent Takes of 1 to 3 tokens in each step: never more than
// Burst + Rate x elapsed tokens are allowed, and nearly that many are.
func runTakeMoving(t *testing.T, stores []tollgate.Store, clock *Clock) {
	limit := tollgate.Limit{Rate: 100, Burst: 50}
	key := tenant(t, stores[0], "k")
	var allowed, failed, taken atomic.Int64
	var advanced time.Duration
	var wg sync.WaitGroup
	// Workers wait for permits instead of spinning, so that the goroutine
	// that moves the clock is never starved of a CPU.
	permits := make(chan struct{}, concurrencyWorkers)
	for w := range concurrencyWorkers {
		tk := takerOf(t, stores[w%len(stores)])
		cost := 1 + int64(w%3)
		wg.Go(func() {
			for range permits {
				r, err := tk.Take(ctx(), key, limit, cost)
				switch {
				case err != nil:
					failed.Add(1)
				case r.Allowed:
					allowed.Add(cost)
				}
				taken.Add(1)
			}
		})
	}
	const perStep = 32
	for step := int64(1); step <= 500; step++ {
		for range perStep {
			permits <- struct{}{}
		}
		for taken.Load() < step*perStep {
			runtime.Gosched()
		}
		clock.Advance(4 * ms)
		advanced += 4 * ms
	}
	close(permits)
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d Takes failed", failed.Load())
	}
	ceiling := limit.Burst + int64(limit.Rate*advanced.Seconds())
	got := allowed.Load()
	if got > ceiling {
		t.Fatalf("allowed %d tokens in %v; Burst + Rate x elapsed is %d", got, advanced, ceiling)
	}
	// Every 4ms step frees 0.4 tokens and workers never stop asking, so
	// nearly all of the budget must have been granted.
	if floor := ceiling * 9 / 10; got < floor {
		t.Fatalf("allowed only %d tokens in %v, want at least %d of %d", got, advanced, floor, ceiling)
	}
}

// runOpsHammer has the workers make each Take Ops of rules on one tenant,
// every round all at once, the clock moving by step between rounds. It
// returns how many were allowed and how far the clock moved. On a stopped
// clock it checks that every rule holds exactly what was taken.
func runOpsHammer(t *testing.T, stores []tollgate.Store, clock *Clock, rules []storekit.Rule, each int, step time.Duration) (int64, time.Duration) {
	key := tenant(t, stores[0], "k")
	var ok, failed, taken atomic.Int64
	var elapsed time.Duration
	var wg sync.WaitGroup
	permits := make(chan struct{}, concurrencyWorkers)
	for w := range concurrencyWorkers {
		s := stores[w%len(stores)]
		wg.Go(func() {
			for range permits {
				op := &storekit.Op{Kind: storekit.Take, Tenant: key, Rules: rules, Cost: 1}
				if w%2 == 0 {
					op.Now = clock.Now()
				}
				if err := s.Do(ctx(), op); err != nil {
					failed.Add(1)
				} else if op.Allowed {
					ok.Add(1)
				}
				taken.Add(1)
			}
		})
	}
	for n := int64(1); n <= int64(each); n++ {
		for range concurrencyWorkers {
			permits <- struct{}{}
		}
		for taken.Load() < n*concurrencyWorkers {
			runtime.Gosched()
		}
		clock.Advance(step)
		elapsed += step
	}
	close(permits)
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d Ops failed", failed.Load())
	}
	if step == 0 {
		op := &storekit.Op{Kind: storekit.Inspect, Tenant: key, Rules: rules, Cost: 1}
		if err := stores[0].Do(ctx(), op); err != nil {
			t.Fatal(err)
		}
		for i, r := range rules {
			if got, want := op.Results[i].Remaining, max(r.Burst-ok.Load(), 0); got != want {
				t.Fatalf("rule %q has %d left after %d allowed requests, want %d: a denied request spent from it",
					r.Name, got, ok.Load(), want)
			}
		}
	}
	return ok.Load(), elapsed
}

// runReservations has 64 goroutines spread over stores reserve one token
// each, at once, on a stopped clock, from a bucket of 5 at 10/s with a
// MaxDelay of 1s: exactly 15 are granted, each a slot of its own (five now,
// then one every 100ms up to 1s), so that together they never exceed the
// rate; the rest are denied and spend nothing, not even from the quota.
func runReservations(t *testing.T, stores []tollgate.Store) {
	rules := []storekit.Rule{bucketRule("", 10, 5), quotaRule("day", daily(1000, nil))}
	key := tenant(t, stores[0], "k")
	delays := make(chan time.Duration, concurrencyWorkers)
	var failed atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range concurrencyWorkers {
		s := stores[w%len(stores)]
		wg.Go(func() {
			<-start
			op := &storekit.Op{Kind: storekit.Take, Tenant: key, Rules: rules, Cost: 1, MaxDelay: time.Second}
			if err := s.Do(ctx(), op); err != nil {
				failed.Add(1)
			} else if op.Allowed {
				delays <- op.Delay
			}
		})
	}
	close(start)
	wg.Wait()
	close(delays)
	if failed.Load() > 0 {
		t.Fatalf("%d Ops failed", failed.Load())
	}
	slots := map[time.Duration]int{}
	granted := 0
	for d := range delays {
		slots[d]++
		granted++
	}
	if granted != 15 {
		t.Fatalf("%d reservations granted, want 15: 5 now and 10 within 1s (slots %v)", granted, slots)
	}
	for k := 1; k <= 10; k++ {
		if d := time.Duration(k) * 100 * ms; slots[d] != 1 {
			t.Fatalf("%d reservations for the slot %v out, want exactly 1 (slots %v)", slots[d], d, slots)
		}
	}
	if slots[0] != 5 {
		t.Fatalf("%d requests granted without a delay, want the burst of 5 (slots %v)", slots[0], slots)
	}
	op := &storekit.Op{Kind: storekit.Inspect, Tenant: key, Rules: rules, Cost: 1}
	if err := stores[0].Do(ctx(), op); err != nil {
		t.Fatal(err)
	}
	if op.Results[0].RetryAfter != 1100*ms || op.Results[1].Remaining != 1000-15 {
		t.Fatalf("after the reservations: the next slot %v out and %d left of the quota, want 1.1s and %d",
			op.Results[0].RetryAfter, op.Results[1].Remaining, 1000-15)
	}
}

// inFlightCap is the cap of RunInFlight's plan; stuckAfter is how long it
// waits for a request to be granted before it calls the slots leaked.
const (
	inFlightCap = 5
	stuckAfter  = 5 * time.Second
)

// RunInFlight has 64 goroutines, spread over one Limiter per store (the
// stores share one backend and clock, as replicas do), make requests of
// one tenant whose plan lets 5 run at once, until requests of them have
// been granted: each granted one holds its slot for a random short time,
// and a denied one tries again within a few milliseconds. Some end early:
// their context is cancelled before the request, during it or while its
// work runs, or the work panics, which a deferred Release lets pass. The
// requests running, counted by the test around the work, are never more
// than 5; once all have ended every slot is free and the cap still holds
// exactly 5. The clock stands still, so that no lease expires: a slot that
// was never given back stays taken.
func RunInFlight(t *testing.T, stores []tollgate.Store, clock *Clock, requests int) {
	plan := tollgate.Plan{Name: "flight", Limit: tollgate.Limit{Rate: 1e6, Burst: 1e12},
		Policies: []tollgate.Policy{{InFlight: inFlightCap}}}
	key := tenant(t, stores[0], "k")
	limiters := make([]*tollgate.Limiter, len(stores))
	for i, s := range stores {
		limiters[i] = clockLimiter(t, s, clock, plan)
	}
	var (
		running, most                                    atomic.Int64
		made, granted, cancelled, panics, degraded, lost atomic.Int64
	)
	errBoom := errors.New("boom")
	// handle is a request as middleware makes it: decide, release when
	// the handler returns, however it returns.
	handle := func(ctx context.Context, l *tollgate.Limiter, work, backoff time.Duration, boom bool) {
		made.Add(1)
		d, err := l.Take(ctx, tollgate.Request{Tenant: key})
		if err != nil || d.Degraded {
			degraded.Add(1)
		}
		if err != nil || !d.Allowed {
			pause(ctx, backoff)
			return
		}
		granted.Add(1)
		defer func() {
			// A store may send a Release whose context has ended, as
			// Redis's does, and then report the context's end.
			if err := l.Release(ctx, &d); err != nil && ctx.Err() == nil {
				lost.Add(1)
			}
		}()
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if boom {
			panic(errBoom)
		}
		pause(ctx, work)
	}
	// A slot that leaked would leave the workers denied for ever: they
	// give up once no request has been granted for a while.
	var stuck atomic.Bool
	watch := make(chan struct{})
	go func() {
		last := int64(-1)
		tick := time.NewTicker(stuckAfter)
		defer tick.Stop()
		for {
			select {
			case <-watch:
				return
			case <-tick.C:
				n := granted.Load()
				if n == last {
					stuck.Store(true)
					return
				}
				last = n
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range concurrencyWorkers {
		l := limiters[w%len(limiters)]
		rng := rand.New(rand.NewPCG(uint64(w), 11))
		wg.Go(func() {
			for granted.Load() < int64(requests) && !stuck.Load() {
				ctx, cancel := context.WithCancel(context.Background())
				var work time.Duration
				if rng.IntN(2) == 0 {
					work = time.Duration(rng.Int64N(int64(200 * time.Microsecond)))
				}
				var stop *time.Timer
				boom := false
				switch p := rng.IntN(100); {
				case p < 5:
					cancel() // the client went away before the request
					cancelled.Add(1)
				case p < 20:
					// The client goes away at some point of it.
					stop = time.AfterFunc(time.Duration(rng.Int64N(int64(300*time.Microsecond))), cancel)
					cancelled.Add(1)
				case p < 25:
					boom = true
				}
				func() {
					defer func() {
						if p := recover(); p != nil {
							if p != errBoom {
								panic(p)
							}
							panics.Add(1)
						}
					}()
					handle(ctx, l, work, time.Duration(rng.Int64N(int64(3*time.Millisecond))), boom)
				}()
				if stop != nil {
					stop.Stop()
				}
				cancel()
			}
		})
	}
	wg.Wait()
	close(watch)
	t.Logf("%d requests granted of %d made, at most %d running at once; %d cancelled, %d panics, %d decisions degraded",
		granted.Load(), made.Load(), most.Load(), cancelled.Load(), panics.Load(), degraded.Load())
	if lost.Load() > 0 {
		t.Fatalf("%d Releases failed: their slots stay taken until their leases end", lost.Load())
	}
	if got := most.Load(); got > inFlightCap {
		t.Fatalf("%d requests ran at once; the cap is %d", got, inFlightCap)
	}
	if stuck.Load() {
		d, err := limiters[0].Inspect(ctx(), key)
		t.Fatalf("no request was granted for %v: slots leaked (%+v, %v)", stuckAfter, d.Results(), err)
	}
	for i, l := range limiters {
		if held := l.SlotsHeld(); len(held) != 0 {
			t.Fatalf("Limiter %d still holds slots after every request ended: %v", i, held)
		}
	}
	// Every slot comes free (a store may send Releases, and release the
	// slots of Takes whose callers gave up, in the background), and the
	// cap still holds exactly.
	for deadline := time.Now().Add(stuckAfter); ; time.Sleep(time.Millisecond) {
		d, err := limiters[0].Inspect(ctx(), key)
		if err != nil {
			t.Fatal(err)
		}
		if r := d.Results()[1]; r.Remaining == inFlightCap {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("%d slots still taken %v after every request ended", inFlightCap-r.Remaining, stuckAfter)
		}
	}
	var held []tollgate.Decision
	for range inFlightCap {
		held = append(held, mustTake(t, limiters[0], tollgate.Request{Tenant: key}, true))
	}
	mustTake(t, limiters[len(limiters)-1], tollgate.Request{Tenant: key}, false)
	for i := range held {
		if err := limiters[0].Release(ctx(), &held[i]); err != nil {
			t.Fatal(err)
		}
	}
}

// pause waits d, or until ctx is done, or gives way to other goroutines if
// d is 0.
func pause(ctx context.Context, d time.Duration) {
	if d == 0 {
		runtime.Gosched()
		return
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-ctx.Done():
	}
}
