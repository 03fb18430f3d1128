package adaptertest

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core/adapterkit"
)

// A SlowWork is the work of the kit's in-flight routes (Setup.Slow), which
// grpctest's in-flight methods share. It counts the calls in the handler
// at once and the most there ever were, so that a case sees what an
// in-flight policy let through, and does what its how says:
//
//	""            return at once
//	"hold:<id>"   wait until Open(id), or until the context ends
//	"pause:<µs>"  wait that long, or until the context ends
//	"panic:<µs>"  pause, then panic with http.ErrAbortHandler
//
// It is safe for concurrent use. Make one with NewSlowWork.
type SlowWork struct {
	now, most, calls atomic.Int64

	mu      sync.Mutex
	gates   map[string]chan struct{} // closed to let a held call return
	entered map[string]chan struct{} // closed when the call is in the handler
	order   []string                 // the held calls, in the order they entered
}

// NewSlowWork returns a SlowWork with nothing held.
func NewSlowWork() *SlowWork {
	return &SlowWork{gates: map[string]chan struct{}{}, entered: map[string]chan struct{}{}}
}

// Do does the work how says, with ctx the request's context.
func (w *SlowWork) Do(ctx context.Context, how string) {
	n := w.now.Add(1)
	defer w.now.Add(-1) // deferred: a panic leaves the handler too
	w.calls.Add(1)
	for m := w.most.Load(); n > m && !w.most.CompareAndSwap(m, n); m = w.most.Load() {
	}
	// A copy: a framework may reuse the memory of the header's value.
	mode, arg, _ := strings.Cut(strings.Clone(how), ":")
	switch mode {
	case "hold":
		gate, entered := w.gate(arg)
		w.mu.Lock()
		w.order = append(w.order, arg)
		w.mu.Unlock()
		close(entered)
		select {
		case <-gate:
		case <-ctx.Done():
		}
	case "pause", "panic":
		us, _ := strconv.Atoi(arg)
		t := time.NewTimer(time.Duration(us) * time.Microsecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		if mode == "panic" {
			// net/http aborts the response without logging a stack.
			panic(http.ErrAbortHandler)
		}
	}
}

// gate returns the gate of id and the channel closed when its call enters,
// making them if need be.
func (w *SlowWork) gate(id string) (gate, entered chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gates[id] == nil {
		w.gates[id], w.entered[id] = make(chan struct{}), make(chan struct{})
	}
	return w.gates[id], w.entered[id]
}

// Open lets the call held with "hold:<id>" return, or the one that will be.
func (w *SlowWork) Open(id string) {
	gate, _ := w.gate(id)
	close(gate)
}

// Entered reports whether the call held with "hold:<id>" is in the handler,
// or was.
func (w *SlowWork) Entered(id string) bool {
	_, entered := w.gate(id)
	select {
	case <-entered:
		return true
	default:
		return false
	}
}

// Order returns the ids of the held calls in the order they entered.
func (w *SlowWork) Order() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.order...)
}

// Now returns how many calls are in the handler now.
func (w *SlowWork) Now() int64 { return w.now.Load() }

// Most returns the most calls that were in the handler at once.
func (w *SlowWork) Most() int64 { return w.most.Load() }

// Calls returns how many calls reached the handler in all.
func (w *SlowWork) Calls() int64 { return w.calls.Load() }

// An outcome is a response, or the client's error: a call that panicked
// or was cancelled has none.
type outcome struct {
	response
	err  error
	took time.Duration
}

// oneShot is the client of the requests that may end without an answer,
// a connection of its own each: a GET that fails on a reused connection
// would be sent again by net/http's client, and reach the handler twice.
var oneShot = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// send sends GET path as t-slots with the SlowHeader how, over client, and
// returns what came back.
func (k *kit) send(ctx context.Context, client *http.Client, path, how string) outcome {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.base+path, nil)
	if err != nil {
		return outcome{err: err}
	}
	req.Header.Set(adapterkit.TenantHeader, "t-slots")
	req.Header.Set(SlowHeader, how)
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return outcome{err: err, took: time.Since(start)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return outcome{err: err, took: time.Since(start)}
	}
	r := response{status: resp.StatusCode, header: resp.Header, body: string(body)}
	k.check(r)
	return outcome{response: r, took: time.Since(start)}
}

// hold sends a request to path that waits in the handler until its gate
// id opens, and returns where its outcome will come.
func (k *kit) hold(path, id string) <-chan outcome {
	k.slow.gate(id)
	out := make(chan outcome, 1)
	go func() { out <- k.send(context.Background(), k.client, path, "hold:"+id) }()
	return out
}

// holdInside sends a hold to GET /slow and waits until it is in the
// handler.
func (k *kit) holdInside(id string) <-chan outcome {
	k.t.Helper()
	out := k.hold("/slow", id)
	k.waitFor(func() bool { return k.slow.Entered(id) }, "request "+id+" in the handler")
	return out
}

// waitFor polls cond until it holds, failing after 10 seconds: what it
// waits for happens on the server's goroutines.
func (k *kit) waitFor(cond func() bool, what string) {
	k.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			k.t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// slotsHeld returns the slots that requests of the plan Slots hold now.
func (k *kit) slotsHeld() int { return k.limiter.SlotsHeld()[Slots.Name] }

// waitIdle waits until no call is in the handler and no slot is held.
func (k *kit) waitIdle() {
	k.t.Helper()
	k.waitFor(func() bool { return k.slow.Now() == 0 && k.slotsHeld() == 0 }, "every slot back")
}

// wantOutcome checks that o is the handler's answer.
func (k *kit) wantOutcome(o outcome, status int) {
	k.t.Helper()
	if o.err != nil {
		k.t.Fatalf("request failed: %v", o.err)
	}
	k.wantStatus(o.response, status)
}

// wantAllSlotsFree checks, through the store, that every slot is free:
// SlotsInFlight requests enter the handler at once, and one more is
// refused. It leaves nothing held.
func (k *kit) wantAllSlotsFree() {
	k.t.Helper()
	var held []<-chan outcome
	var ids []string
	for i := range SlotsInFlight {
		id := fmt.Sprintf("free-%d-%d", k.slow.Calls(), i)
		held, ids = append(held, k.holdInside(id)), append(ids, id)
	}
	k.wantInFlightRefusal(k.get("/slow", "t-slots"))
	for _, id := range ids {
		k.slow.Open(id)
	}
	for _, o := range held {
		k.wantOutcome(<-o, http.StatusOK)
	}
	k.waitIdle()
}

// The headers of the plan Slots: its bucket, and its in-flight policy,
// which has a unit and no window.
const slotsPolicy = `"slots";q=100000;w=1, "slots-inflight";q=3;qu="concurrent-requests"`

// wantInFlightRefusal checks r is the refusal of a request for want of a
// slot: 429, the in-flight policy named, its unit stated, and the
// estimated Retry-After of 1 second.
func (k *kit) wantInFlightRefusal(r response) {
	k.t.Helper()
	k.wantStatus(r, http.StatusTooManyRequests)
	body := k.wantProblem(r, http.StatusTooManyRequests)
	if got := r.header.Get("Retry-After"); got != "1" {
		k.t.Errorf("Retry-After = %q, want the estimate 1", got)
	}
	if got := r.header.Get("RateLimit-Policy"); got != slotsPolicy {
		k.t.Errorf("RateLimit-Policy = %q, want %q", got, slotsPolicy)
	}
	if got := r.header.Get("RateLimit"); !strings.HasSuffix(got, `, "slots-inflight";r=0`) {
		k.t.Errorf("RateLimit = %q, want the in-flight policy with r=0 and no t", got)
	}
	if r.header.Get("X-RateLimit-Limit") != "3" || r.header.Get("X-RateLimit-Remaining") != "0" {
		k.t.Errorf("X-RateLimit-Limit %q, Remaining %q; want 3 and 0, the in-flight policy's",
			r.header.Get("X-RateLimit-Limit"), r.header.Get("X-RateLimit-Remaining"))
	}
	if body == nil {
		return
	}
	if v, _ := body["violated-policies"].([]any); len(v) != 1 || v[0] != "slots-inflight" || body["policy"] != "slots-inflight" {
		k.t.Errorf("violated-policies %v, policy %v; want [slots-inflight]", body["violated-policies"], body["policy"])
	}
	if d, _ := body["detail"].(string); !strings.Contains(d, adapterkit.UnitConcurrentRequests) {
		k.t.Errorf("detail %q does not state the unit, %s", d, adapterkit.UnitConcurrentRequests)
	}
}

// tokensLeft returns the tokens left in the bucket of t-slots.
func (k *kit) tokensLeft() int64 {
	k.t.Helper()
	d, err := k.limiter.Inspect(context.Background(), "t-slots")
	if err != nil {
		k.t.Fatal(err)
	}
	for i, p := range d.Policies() {
		if p.Name == Slots.Name {
			return d.Results()[i].Remaining
		}
	}
	k.t.Fatalf("no policy %q in %+v", Slots.Name, d.Policies())
	return 0
}

// stressFor is how long NoLeak sends requests.
const stressFor = 2 * time.Second

// runInFlight checks the in-flight policy of the plan Slots through GET
// /slow and GET /slow-held.
func runInFlight(t *testing.T, newServer serverOf) {
	t.Run("Headers", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		r := k.get("/slow", "t-slots")
		k.wantOK(r)
		want := map[string]string{
			"RateLimit-Policy":      slotsPolicy,
			"RateLimit":             `"slots";r=99999;t=1, "slots-inflight";r=2`,
			"X-RateLimit-Limit":     "3", // the in-flight policy, with 2 free, is closest to denying
			"X-RateLimit-Remaining": "2",
		}
		for name, v := range want {
			if got := r.header.Get(name); got != v {
				t.Errorf("%s = %q, want %q", name, got, v)
			}
		}
		// Every slot is free again once the handler has returned.
		for range 2 * SlotsInFlight {
			k.waitIdle()
			if got := k.get("/slow", "t-slots").header.Get("RateLimit"); !strings.HasSuffix(got, `"slots-inflight";r=2`) {
				t.Fatalf("RateLimit = %q after the earlier requests returned, want 2 slots free", got)
			}
		}
		k.waitIdle()
	})

	t.Run("Refusal", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		var held []<-chan outcome
		for i := range SlotsInFlight {
			held = append(held, k.holdInside("h"+strconv.Itoa(i)))
		}
		if n := k.slotsHeld(); n != SlotsInFlight {
			t.Fatalf("%d slots held, want %d", n, SlotsInFlight)
		}
		before := k.tokensLeft()
		r := k.get("/slow", "t-slots")
		k.wantInFlightRefusal(r)
		if got := k.slow.Calls(); got != SlotsInFlight {
			t.Errorf("the handler was called %d times, want %d: the refused request reached it", got, SlotsInFlight)
		}
		if after := k.tokensLeft(); after != before {
			t.Errorf("the refused request took %d tokens, want none", before-after)
		}
		for i := range SlotsInFlight {
			k.slow.Open("h" + strconv.Itoa(i))
		}
		for _, o := range held {
			k.wantOutcome(<-o, http.StatusOK)
		}
		k.waitIdle()
		k.wantOK(k.get("/slow", "t-slots"))
	})

	t.Run("NeverExceeded", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		const workers, each = 24, 25
		var ok, refused atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for range each {
					o := k.send(context.Background(), k.client, "/slow", "pause:"+strconv.Itoa(rand.IntN(3000)))
					switch {
					case o.err != nil:
						t.Error(o.err)
						return
					case o.status == http.StatusOK:
						ok.Add(1)
					case o.status == http.StatusTooManyRequests:
						refused.Add(1)
					default:
						t.Errorf("status %d: %s", o.status, o.body)
					}
				}
			})
		}
		wg.Wait()
		most := k.slow.Most()
		t.Logf("%d requests by %d clients: %d served, %d refused; at most %d in the handler at once",
			workers*each, workers, ok.Load(), refused.Load(), most)
		if most > SlotsInFlight {
			t.Errorf("%d requests in the handler at once, over the limit of %d", most, SlotsInFlight)
		}
		if refused.Load() == 0 {
			t.Errorf("no request was refused: the limit was never reached")
		}
		k.waitIdle()
	})

	t.Run("BackAfterPanic", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		for i := range SlotsInFlight + 2 {
			o := k.send(context.Background(), oneShot, "/slow", "panic:0")
			if o.err == nil && o.status != http.StatusInternalServerError {
				t.Fatalf("a handler that panicked: %d %q, want no answer or 500", o.status, o.body)
			}
			k.waitIdle()
			if got := k.slow.Calls(); got != int64(i+1) {
				t.Fatalf("%d calls reached the handler after %d requests: a slot is still held", got, i+1)
			}
		}
		k.wantAllSlotsFree()
	})

	t.Run("BackAfterCancel", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		byContext := 0
		for i := range SlotsInFlight + 1 {
			id := "c" + strconv.Itoa(i)
			k.slow.gate(id)
			ctx, cancel := context.WithCancel(context.Background())
			out := make(chan outcome, 1)
			go func() { out <- k.send(ctx, oneShot, "/slow", "hold:"+id) }()
			k.waitFor(func() bool { return k.slow.Entered(id) }, "the request in the handler")
			cancel()
			if o := <-out; o.err == nil {
				t.Fatalf("a cancelled request got %d %q", o.status, o.body)
			}
			// Servers that end the request's context when its client
			// goes away end the handler's wait; for the others, the
			// gate does, later. The slot comes back either way.
			deadline := time.Now().Add(500 * time.Millisecond)
			for k.slow.Now() != 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if k.slow.Now() == 0 {
				byContext++
			}
			k.slow.Open(id)
			k.waitIdle()
		}
		t.Logf("%d of %d handlers ended by the request's context", byContext, SlotsInFlight+1)
		k.wantAllSlotsFree()
	})

	t.Run("NoLeak", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		counts := runStress(t, k)
		k.waitIdle()
		most := k.slow.Most()
		t.Logf("%s; at most %d in the handler at once", counts, most)
		if most > SlotsInFlight {
			t.Errorf("%d requests in the handler at once, over the limit of %d", most, SlotsInFlight)
		}
		k.wantAllSlotsFree()
	})

	t.Run("DelayModeWaitsForSlot", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		var held []<-chan outcome
		for i := range SlotsInFlight {
			held = append(held, k.holdInside("h"+strconv.Itoa(i)))
		}
		// Two requests wait for a slot, first a then b: each is refused
		// by its decision, and joins the line a moment later.
		refusals := func() int { return len(k.events.All()) }
		a := k.hold("/slow-held", "a")
		k.waitFor(func() bool { return refusals() >= 1 }, "the first request refused")
		time.Sleep(50 * time.Millisecond)
		n := refusals()
		b := k.hold("/slow-held", "b")
		k.waitFor(func() bool { return refusals() > n }, "the second request refused")
		time.Sleep(50 * time.Millisecond)
		if k.slow.Entered("a") || k.slow.Entered("b") {
			t.Fatal("a request entered the handler with every slot held")
		}
		k.slow.Open("h0")
		k.waitFor(func() bool { return k.slow.Entered("a") }, "the first waiter in the handler")
		time.Sleep(100 * time.Millisecond) // b must stay out meanwhile
		if k.slow.Entered("b") {
			t.Fatal("the second waiter entered with one slot free: it went before the first")
		}
		k.slow.Open("h1")
		k.waitFor(func() bool { return k.slow.Entered("b") }, "the second waiter in the handler")
		if order := k.slow.Order(); strings.Join(order[len(order)-2:], " ") != "a b" {
			t.Errorf("entered in the order %v, want a before b", order)
		}
		for _, id := range []string{"a", "b", "h2"} {
			k.slow.Open(id)
		}
		for _, o := range append(held, a, b) {
			k.wantOutcome(<-o, http.StatusOK)
		}
		k.waitIdle()
	})

	t.Run("DelayModeGivesUp", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		var held []<-chan outcome
		for i := range SlotsInFlight {
			held = append(held, k.holdInside("h"+strconv.Itoa(i)))
		}
		before := k.tokensLeft()
		o := k.send(context.Background(), k.client, "/slow-held", "")
		if o.err != nil {
			t.Fatal(o.err)
		}
		k.wantInFlightRefusal(o.response)
		if o.took < SlotDelay*9/10 {
			t.Errorf("refused after %v, want after waiting about %v for a slot", o.took, SlotDelay)
		}
		if after, n := k.tokensLeft(), k.slotsHeld(); after != before || n != SlotsInFlight {
			t.Errorf("after giving up: %d tokens taken, %d slots held; want none taken and the %d held before",
				before-after, n, SlotsInFlight)
		}
		for i := range SlotsInFlight {
			k.slow.Open("h" + strconv.Itoa(i))
		}
		for _, o := range held {
			k.wantOutcome(<-o, http.StatusOK)
		}
		k.waitIdle()
	})
}

// stressCounts counts the outcomes of runStress.
type stressCounts struct {
	requests, served, refused, panicked, cancelled, held int64
}

func (c stressCounts) String() string {
	return fmt.Sprintf("%d requests in %v (%d served, %d refused, %d panicked, %d cancelled by the client; %d of them in the delay mode)",
		c.requests, stressFor, c.served, c.refused, c.panicked, c.cancelled, c.held)
}

// runStress sends requests as t-slots from 16 clients for stressFor: a
// quarter of them to GET /slow-held, the rest to GET /slow; a fifth of
// them panic in the handler, a fifth are cancelled by their client after
// up to 3 ms, and the handler pauses up to 2 ms.
func runStress(t *testing.T, k *kit) stressCounts {
	var mu sync.Mutex
	var c stressCounts
	stop := time.Now().Add(stressFor)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				path := "/slow"
				if rand.IntN(4) == 0 {
					path = "/slow-held"
				}
				pause := strconv.Itoa(rand.IntN(2000))
				var o outcome
				var panicked, cancelled bool
				switch rand.IntN(5) {
				case 0:
					panicked = true
					o = k.send(context.Background(), oneShot, path, "panic:"+pause)
				case 1:
					cancelled = true
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(3000))*time.Microsecond)
					o = k.send(ctx, oneShot, path, "pause:"+pause)
					cancel()
				default:
					o = k.send(context.Background(), k.client, path, "pause:"+pause)
				}
				mu.Lock()
				c.requests++
				if path == "/slow-held" {
					c.held++
				}
				switch {
				case o.err == nil && o.status == http.StatusOK:
					c.served++
				case o.err == nil && o.status == http.StatusTooManyRequests:
					c.refused++
				case panicked && (o.err != nil || o.status == http.StatusInternalServerError):
					c.panicked++
				case cancelled && o.err != nil:
					c.cancelled++
				default:
					t.Errorf("%s: %d %q, error %v", path, o.status, o.body, o.err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return c
}
