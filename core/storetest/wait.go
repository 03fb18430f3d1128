package storetest

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// WaitCallers is how many goroutines RunWait spreads over the stores it is
// given.
const WaitCallers = 64

// RunWait checks tollgate.Limiter.Wait over stores that share one backend
// and run on the real clock (Redis's TIME, the memory store's monotonic
// clock, a ModelStore on time.Now), one Limiter per store, as replicas
// have: WaitCallers goroutines spread over the Limiters are served at the
// plan's rate with no overshoot in any window; callers of one Limiter
// proceed in the order they arrived; a caller whose context ends while it
// waits spends nothing; a wait that cannot fit its context's deadline
// fails at once, spending nothing; a quota exhausted for the day is an
// error without a deadline. It waits in real time, about 6 seconds.
func RunWait(t *testing.T, stores []tollgate.Store) {
	t.Run("RateAcrossStores", func(t *testing.T) { runWaitRate(t, stores) })
	t.Run("ArrivalOrder", func(t *testing.T) { runWaitOrder(t, stores[0]) })
	t.Run("CancelledSpendsNothing", func(t *testing.T) { runWaitCancelled(t, stores[0]) })
	t.Run("DeadlineTooShortFailsAtOnce", func(t *testing.T) { runWaitDeadline(t, stores[len(stores)-1]) })
	t.Run("QuotaWithoutDeadline", func(t *testing.T) { runWaitQuota(t, stores[0]) })
}

// waitLimiter returns a Limiter over store for plan. Its failure policy is
// fail-closed, so that a slow store on a loaded machine shows up as an
// error rather than as a request let through.
func waitLimiter(t *testing.T, store tollgate.Store, plan tollgate.Plan, opts ...tollgate.Option) *tollgate.Limiter {
	t.Helper()
	opts = append([]tollgate.Option{tollgate.WithLogger(nil), tollgate.WithFailClosed(true)}, opts...)
	l, err := tollgate.New(store, tollgate.SinglePlan(plan), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// jitter is how late a goroutine may wake from its timer, and a store's
// answer may come, on a loaded machine: proceed times are measured to
// within it.
const jitter = 80 * time.Millisecond

// runWaitRate has WaitCallers goroutines, spread over one Limiter per
// store, call Wait in a loop on one tenant for 3 seconds, each with the
// end of the run as its deadline. The plan allows a burst of 5 and 10 a
// second: 35 callers proceed in all, and no window of the run holds more
// than the burst plus the rate times its length.
func runWaitRate(t *testing.T, stores []tollgate.Store) {
	plan := tollgate.Plan{Name: "ten", Limit: tollgate.Limit{Rate: 10, Burst: 5}}
	const run = 3 * time.Second
	key := tenant(t, stores[0], "k")
	limiters := make([]*tollgate.Limiter, len(stores))
	for i, s := range stores {
		limiters[i] = waitLimiter(t, s, plan)
	}
	start := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(run))
	defer cancel()
	var mu sync.Mutex
	var proceeded []time.Duration // since start
	perStore := make([]int, len(stores))
	errs := make(chan error, WaitCallers)
	var wg sync.WaitGroup
	for w := range WaitCallers {
		l, i := limiters[w%len(limiters)], w%len(limiters)
		wg.Go(func() {
			for {
				_, err := l.Wait(ctx, tollgate.Request{Tenant: key})
				if err != nil {
					errs <- err
					return
				}
				at := time.Since(start)
				mu.Lock()
				proceeded = append(proceeded, at)
				perStore[i]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		// The run's end: a slot past it is refused at once, or the
		// deadline passes as a caller wakes.
		if !errors.Is(err, tollgate.ErrWaitExceedsDeadline) && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait: %v", err)
		}
	}
	slices.Sort(proceeded)
	burst, rate := plan.Limit.Burst, plan.Limit.Rate
	// Slots are 100ms apart from the first request: 5 at once, then one
	// at 0.1s, 0.2s, ... up to the end of the run.
	want := burst + int64(rate*run.Seconds())
	if n := int64(len(proceeded)); n < want-1 || n > want {
		t.Fatalf("%d callers proceeded in %v, want %d (burst %d + %v/s): %v", n, run, want, burst, rate, proceeded)
	}
	for i := range proceeded {
		for j := i; j < len(proceeded); j++ {
			window := proceeded[j] - proceeded[i]
			allowed := burst + int64(rate*(window+jitter).Seconds())
			if n := int64(j - i + 1); n > allowed {
				t.Fatalf("%d callers proceeded within %v (from %v to %v), more than the %d the plan allows: %v",
					n, window, proceeded[i], proceeded[j], allowed, proceeded)
			}
		}
	}
	if last := proceeded[len(proceeded)-1]; last < run-100*ms-jitter {
		t.Fatalf("the last caller proceeded at %v; the rate allows callers until %v", last, run)
	}
	t.Logf("%d callers proceeded in %v (per store %v), the last at %v", len(proceeded), run, perStore, proceeded[len(proceeded)-1])
}

// runWaitOrder has callers arrive at one Limiter one after another, each
// once the store has decided on the previous one, on an empty bucket of 1
// at 10 a second: they proceed in the order they arrived, each at its
// slot.
func runWaitOrder(t *testing.T, store tollgate.Store) {
	const callers = 6
	plan := tollgate.Plan{Name: "ten", Limit: tollgate.Limit{Rate: 10, Burst: 1}}
	reserved := make(chan string, callers+1)
	l := waitLimiter(t, store, plan, tollgate.WithObserver(observerFunc(func(d *tollgate.Decision) {
		reserved <- d.Route
	})))
	key := tenant(t, store, "k")
	ctx := context.Background()
	if d, err := l.Take(ctx, tollgate.Request{Tenant: key, Route: "first"}); err != nil || !d.Allowed {
		t.Fatalf("the first request: %+v, %v", d, err)
	}
	<-reserved
	start := time.Now()
	type done struct {
		caller int
		at     time.Duration
	}
	order := make(chan done, callers)
	errs := make(chan error, callers)
	for i := range callers {
		go func() {
			_, err := l.Wait(ctx, tollgate.Request{Tenant: key, Route: strconv.Itoa(i)})
			if err != nil {
				errs <- err
				return
			}
			order <- done{i, time.Since(start)}
		}()
		select {
		case r := <-reserved:
			if r != strconv.Itoa(i) {
				t.Fatalf("caller %d arrived, caller %s reserved", i, r)
			}
		case err := <-errs:
			t.Fatalf("caller %d: %v", i, err)
		case <-time.After(5 * time.Second):
			t.Fatalf("caller %d made no reservation", i)
		}
	}
	for i := range callers {
		select {
		case d := <-order:
			if d.caller != i {
				t.Fatalf("caller %d proceeded %s; callers proceed in the order they arrived", d.caller, ordinal(i))
			}
			// Caller i's slot is (i+1) x 100ms after the first request,
			// which was before start.
			if slot := time.Duration(i+1)*100*ms - jitter; d.at < slot {
				t.Fatalf("caller %d proceeded at %v, before its slot at %v", i, d.at, slot+jitter)
			}
		case err := <-errs:
			t.Fatalf("Wait: %v", err)
		case <-time.After(5 * time.Second):
			t.Fatalf("caller %d never proceeded", i)
		}
	}
}

func ordinal(i int) string {
	switch i {
	case 0:
		return "first"
	case 1:
		return "second"
	case 2:
		return "third"
	}
	return strconv.Itoa(i+1) + "th"
}

// observerFunc is a tollgate.Observer made of a function.
type observerFunc func(*tollgate.Decision)

func (f observerFunc) Observe(_ context.Context, d *tollgate.Decision) { f(d) }

// untilFull returns how long until tenant's bucket is full again, by
// Inspect.
func untilFull(t *testing.T, l *tollgate.Limiter, tenant string) time.Duration {
	t.Helper()
	d, err := l.Inspect(context.Background(), tenant)
	if err != nil {
		t.Fatal(err)
	}
	return d.Results()[0].ResetAfter
}

// wantUntilFull checks that tenant's bucket is full again after about
// want, give or take jitter.
func wantUntilFull(t *testing.T, l *tollgate.Limiter, tenant string, want time.Duration, why string) {
	t.Helper()
	if got := untilFull(t, l, tenant); got < want-jitter || got > want+jitter {
		t.Fatalf("%s: the bucket is full in %v, want %v: %s", tenant, got, want, why)
	}
}

// emptyBucketOfOne returns a Limiter on store whose plan is a bucket of 1
// at 2 a second, and a tenant whose bucket it has just emptied.
func emptyBucketOfOne(t *testing.T, store tollgate.Store) (*tollgate.Limiter, string) {
	plan := tollgate.Plan{Name: "two", Limit: tollgate.Limit{Rate: 2, Burst: 1}}
	l := waitLimiter(t, store, plan)
	key := tenant(t, store, "k")
	if d, err := l.Take(context.Background(), tollgate.Request{Tenant: key}); err != nil || !d.Allowed {
		t.Fatalf("the first request: %+v, %v", d, err)
	}
	return l, key
}

// runWaitCancelled cancels a Wait on an empty bucket of 1 at 2 a second
// well before its slot: Wait returns the context's error at once, and the
// bucket is as if the caller had never come.
func runWaitCancelled(t *testing.T, store tollgate.Store) {
	l, key := emptyBucketOfOne(t, store)
	start := time.Now()
	full := untilFull(t, l, key) // about 500ms
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*ms, cancel)
	_, err := l.Wait(ctx, tollgate.Request{Tenant: key})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a Wait cancelled while it waits: %v, want context.Canceled", err)
	}
	if took := time.Since(start); took > 100*ms+jitter {
		t.Fatalf("the cancelled Wait returned after %v, want at the cancel (100ms)", took)
	}
	// The tokens are given back in the background.
	deadline := time.Now().Add(2 * time.Second)
	for untilFull(t, l, key) > full-time.Since(start)+jitter && time.Now().Before(deadline) {
		time.Sleep(5 * ms)
	}
	wantUntilFull(t, l, key, full-time.Since(start), "a cancelled wait spends nothing")
	// The next caller takes the slot the cancelled one had.
	if _, err := l.Wait(context.Background(), tollgate.Request{Tenant: key}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > full+jitter {
		t.Fatalf("the next caller proceeded after %v, want the cancelled caller's slot at %v", took, full)
	}
}

// runWaitDeadline calls Wait on an empty bucket of 1 at 2 a second with a
// deadline before the next token: it fails at once, wrapping
// ErrWaitExceedsDeadline, and spends nothing; with a deadline past the
// token it proceeds.
func runWaitDeadline(t *testing.T, store tollgate.Store) {
	l, key := emptyBucketOfOne(t, store)
	start := time.Now()
	full := untilFull(t, l, key)
	ctx, cancel := context.WithTimeout(context.Background(), 300*ms)
	defer cancel()
	d, err := l.Wait(ctx, tollgate.Request{Tenant: key})
	if !errors.Is(err, tollgate.ErrWaitExceedsDeadline) {
		t.Fatalf("a Wait whose deadline comes before the token: %v, want ErrWaitExceedsDeadline", err)
	}
	if took := time.Since(start); took > jitter {
		t.Fatalf("the Wait that could not fit its deadline failed after %v, want at once", took)
	}
	if d.Allowed || d.RetryAfter < full-jitter {
		t.Fatalf("its decision: %+v, want a denial with the time until the token", d)
	}
	wantUntilFull(t, l, key, full-time.Since(start), "a wait that cannot fit spends nothing")
	ctx, cancel = context.WithTimeout(context.Background(), full+200*ms)
	defer cancel()
	if _, err := l.Wait(ctx, tollgate.Request{Tenant: key}); err != nil {
		t.Fatalf("a Wait whose deadline is past the token: %v", err)
	}
	if took := time.Since(start); took < full-jitter {
		t.Fatalf("it proceeded after %v, before the token came at %v", took, full)
	}
}

// runWaitQuota exhausts a daily quota of 2: without a deadline, Wait fails
// at once rather than wait for tomorrow.
func runWaitQuota(t *testing.T, store tollgate.Store) {
	plan := tollgate.Plan{Name: "daily", Limit: tollgate.Limit{Rate: 100, Burst: 100},
		Policies: []tollgate.Policy{{Quota: daily(2, nil)}}}
	l := waitLimiter(t, store, plan)
	key := tenant(t, store, "k")
	for range 2 {
		if _, err := l.Wait(context.Background(), tollgate.Request{Tenant: key}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	if _, err := l.Wait(context.Background(), tollgate.Request{Tenant: key}); !errors.Is(err, tollgate.ErrWaitExceedsDeadline) {
		t.Fatalf("a Wait on an exhausted daily quota: %v, want ErrWaitExceedsDeadline", err)
	}
	if took := time.Since(start); took > jitter {
		t.Fatalf("it failed after %v, want at once", took)
	}
}
