package adapterkit_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adapterkit"
	"github.com/tollgate-go/tollgate/core/adaptertest"
)

var twoInFlight = tollgate.Plan{Name: "pro", Limit: tollgate.Limit{Rate: 10, Burst: 10},
	Policies: []tollgate.Policy{{InFlight: 2}}}

func build(t *testing.T, s adapterkit.Spec[struct{}]) *adapterkit.Handler[struct{}] {
	t.Helper()
	h, err := adapterkit.Build(s, adapterkit.Framework{})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// decide lets h decide on a request of tenant, and returns the answer and
// its headers.
func decide(h *adapterkit.Handler[struct{}], ctx context.Context, tenant string) (*adapterkit.Answer, http.Header) {
	hdr := http.Header{}
	a := h.Decide(struct{}{}, &adapterkit.Call{Context: ctx, Method: http.MethodGet, Tenant: tenant}, adapterkit.Headers{Map: hdr})
	return a, hdr
}

// TestInFlightHeaders: an in-flight policy is listed with its unit and no
// window, and reported with its free slots and no t; a refusal for want of
// a slot says so, with the estimated Retry-After.
func TestInFlightHeaders(t *testing.T) {
	l, _, clock := adaptertest.NewLimiter(t, tollgate.SinglePlan(twoInFlight))
	h := build(t, adapterkit.Spec[struct{}]{Limiter: l})
	ctx := context.Background()
	a1, hdr := decide(h, ctx, "t")
	wantHeaders(t, hdr, map[string]string{
		"X-RateLimit-Limit":     "2", // one slot of two left: closest to denying
		"X-RateLimit-Remaining": "1",
		"X-RateLimit-Reset":     "1767225600", // now: no one knows when a slot frees
		"RateLimit-Policy":      `"pro";q=10;w=1, "pro-inflight";q=2;qu="concurrent-requests"`,
		"RateLimit":             `"pro";r=9;t=1, "pro-inflight";r=1`,
	})
	if clock.Now().Unix() != 1767225600 {
		t.Fatalf("the test clock starts at %v", clock.Now())
	}
	a2, _ := decide(h, ctx, "t")
	a3, hdr := decide(h, ctx, "t")
	if a3.Status != http.StatusTooManyRequests || !a3.Denied() {
		t.Fatalf("third request in flight: %d, want 429", a3.Status)
	}
	wantHeaders(t, hdr, map[string]string{
		"X-RateLimit-Limit":     "2",
		"X-RateLimit-Remaining": "0",
		"X-RateLimit-Reset":     "1767225600",
		"RateLimit-Policy":      `"pro";q=10;w=1, "pro-inflight";q=2;qu="concurrent-requests"`,
		"RateLimit":             `"pro";r=8;t=1, "pro-inflight";r=0`,
		"Retry-After":           "1",
	})
	b := a3.Body
	if b.Type != adapterkit.ProblemQuotaExceeded || b.Violated != "pro-inflight" || b.Policy != "pro-inflight" ||
		b.RetryAfter != 1 || !strings.Contains(b.Message, "2 concurrent-requests") {
		t.Errorf("body %+v", b)
	}
	for _, a := range []*adapterkit.Answer{a1, a2, a3} {
		a.Release()
	}
	if held := l.SlotsHeld(); len(held) != 0 {
		t.Errorf("slots held after every answer was released: %v", held)
	}
}

// TestReleaseGivesTheSlotBack: Release gives the slot back, even when the
// request's context has ended, and only once; a denied request holds none.
func TestReleaseGivesTheSlotBack(t *testing.T) {
	l, _, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(twoInFlight))
	h := build(t, adapterkit.Spec[struct{}]{Limiter: l})
	ctx, cancel := context.WithCancel(context.Background())
	a, _ := decide(h, ctx, "t")
	if a.Status != 0 || l.SlotsHeld()["pro"] != 1 {
		t.Fatalf("status %d, slots %v: want the request let through holding a slot", a.Status, l.SlotsHeld())
	}
	cancel() // the client went away
	a.Release()
	if held := l.SlotsHeld(); len(held) != 0 {
		t.Fatalf("slots held after Release: %v", held)
	}
	// The store agrees: two requests fit again, and a third does not.
	var answers []*adapterkit.Answer
	for _, want := range []int{0, 0, http.StatusTooManyRequests} {
		a, _ := decide(h, context.Background(), "t")
		if a.Status != want {
			t.Fatalf("status %d, want %d", a.Status, want)
		}
		answers = append(answers, a)
	}
	for _, a := range answers {
		a.Release()
	}
	if held := l.SlotsHeld(); len(held) != 0 {
		t.Errorf("slots held: %v", held)
	}
}

// TestDelayModeWaitsForSlot: in the delay mode a request refused for want
// of a slot waits for one within MaxDelay, and gets 429 having spent
// nothing when none frees in time.
func TestDelayModeWaitsForSlot(t *testing.T) {
	l, _, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(twoInFlight))
	h := build(t, adapterkit.Spec[struct{}]{Limiter: l, MaxDelay: 300 * time.Millisecond})
	ctx := context.Background()
	a1, _ := decide(h, ctx, "t")
	a2, _ := decide(h, ctx, "t")

	start := time.Now()
	a3, _ := decide(h, ctx, "t")
	if a3.Status != http.StatusTooManyRequests || time.Since(start) < 250*time.Millisecond {
		t.Fatalf("with no slot freed: %d after %v, want 429 after about 300ms", a3.Status, time.Since(start))
	}
	if d, _ := l.Inspect(ctx, "t"); d.Results()[0].Remaining != 8 {
		t.Errorf("%d tokens left, want 8: the refused request spent none", d.Results()[0].Remaining)
	}
	a3.Release()

	go func() {
		time.Sleep(50 * time.Millisecond)
		a1.Release()
	}()
	start = time.Now()
	a4, _ := decide(h, ctx, "t")
	if a4.Status != 0 || time.Since(start) > 250*time.Millisecond {
		t.Fatalf("with a slot freed after 50ms: %d after %v, want it let through at once", a4.Status, time.Since(start))
	}
	a4.Release()
	a2.Release()
	if held := l.SlotsHeld(); len(held) != 0 {
		t.Errorf("slots held: %v", held)
	}
}

// TestPartitionKey: with a secret, every RateLimit item carries the keyed
// hash of the tenant as a byte sequence, never the tenant; a short secret
// is a configuration error.
func TestPartitionKey(t *testing.T) {
	l, _, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(twoInFlight))
	if _, err := adapterkit.Build(adapterkit.Spec[struct{}]{Limiter: l, PartitionKeySecret: []byte("short")}, adapterkit.Framework{}); err == nil ||
		!strings.Contains(err.Error(), "PartitionKeySecret") {
		t.Errorf("a 5-byte secret: %v, want an error naming PartitionKeySecret", err)
	}
	secret := []byte("0123456789abcdef0123456789abcdef")
	h := build(t, adapterkit.Spec[struct{}]{Limiter: l, PartitionKeySecret: secret})
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("acme"))
	pk := ";pk=:" + base64.StdEncoding.EncodeToString(mac.Sum(nil)[:16]) + ":"
	a, hdr := decide(h, context.Background(), "acme")
	defer a.Release()
	want := `"pro";r=9;t=1` + pk + `, "pro-inflight";r=1` + pk
	if got := hdr.Get("RateLimit"); got != want {
		t.Errorf("RateLimit = %q, want %q", got, want)
	}
	if strings.Contains(hdr.Get("RateLimit"), "acme") || strings.Contains(hdr.Get("RateLimit-Policy"), "pk") {
		t.Errorf("RateLimit %q, RateLimit-Policy %q: the tenant shown, or a key in the policies", hdr.Get("RateLimit"), hdr.Get("RateLimit-Policy"))
	}
	b, other := decide(h, context.Background(), "globex")
	defer b.Release()
	if strings.Contains(other.Get("RateLimit"), pk) {
		t.Errorf("two tenants, one partition key: %q", other.Get("RateLimit"))
	}
	// Without the secret, no key.
	c, plain := decide(build(t, adapterkit.Spec[struct{}]{Limiter: l}), context.Background(), "initech")
	defer c.Release()
	if strings.Contains(plain.Get("RateLimit"), "pk=") {
		t.Errorf("RateLimit %q without a secret", plain.Get("RateLimit"))
	}
}
