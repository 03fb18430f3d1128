package tollgate_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
)

func TestHeaders(t *testing.T) {
	l, clock := newLimiter(t, nil)
	ctx := context.Background()
	d, _ := l.Take(ctx, tollgate.Request{Tenant: "t", Cost: 3})
	h := http.Header{}
	d.WriteHeaders(h)
	epoch := clock.Now().Unix()
	want := map[string]string{
		"X-RateLimit-Limit":     "20",
		"X-RateLimit-Remaining": "17",
		"X-RateLimit-Reset":     strconv.FormatInt(epoch+2, 10), // 1.5s, rounded up
		"RateLimit-Policy":      `"free";q=20;w=10`,
		"RateLimit":             `"free";r=17;t=2`,
	}
	for k, v := range want {
		if got := h.Values(k); len(got) != 1 || got[0] != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if len(h) != len(want) {
		t.Errorf("headers %v, want exactly %d (no Retry-After on an allowed request)", h, len(want))
	}

	for i := 0; i < 17; i++ {
		l.Take(ctx, tollgate.Request{Tenant: "t"})
	}
	clock.Advance(200 * time.Millisecond)
	d, _ = l.Take(ctx, tollgate.Request{Tenant: "t"})
	if d.Allowed {
		t.Fatal("bucket should be empty")
	}
	visited := map[string]string{}
	d.VisitHeaders(func(k, v string) { visited[k] = v })
	if visited["Retry-After"] != "1" { // 300ms rounds up to 1, never 0
		t.Errorf("Retry-After = %q, want 1", visited["Retry-After"])
	}
	if visited["Ratelimit"] != `"free";r=0;t=10` {
		t.Errorf("RateLimit = %q", visited["Ratelimit"])
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int64{
		time.Nanosecond: 1, 999 * time.Millisecond: 1, time.Second: 1, time.Second + 1: 2, 90 * time.Second: 90, 0: 1,
	} {
		if got := tollgate.RetryAfterSeconds(d); got != want {
			t.Errorf("RetryAfterSeconds(%v) = %d, want %d", d, got, want)
		}
	}
}

func TestPolicyWindowIsAtLeastOneSecond(t *testing.T) {
	plan := tollgate.Plan{Name: "fast", Limit: tollgate.Limit{Rate: 1000, Burst: 10}} // refills in 10ms
	l, err := tollgate.New(newMemory(t), tollgate.SinglePlan(plan), tollgate.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	d, _ := l.Take(context.Background(), tollgate.Request{Tenant: "t"})
	h := http.Header{}
	d.WriteHeaders(h)
	if got := h.Get("RateLimit-Policy"); got != `"fast";q=10;w=1` {
		t.Errorf("RateLimit-Policy = %q, want w=1", got)
	}
}

func TestPlanNames(t *testing.T) {
	for _, name := range []string{"", strings.Repeat("p", 65), "caf\u00e9", "a\nb", "tab\there"} {
		if err := (tollgate.Plan{Name: name, Limit: tollgate.Free.Limit}).Validate(); err == nil {
			t.Errorf("plan name %q accepted", name)
		}
	}
	// Quotes and backslashes are escaped as Structured Field strings.
	plan := tollgate.Plan{Name: `pro "plus" \ more`, Limit: tollgate.Free.Limit}
	l, _ := tollgate.New(newMemory(t), tollgate.SinglePlan(plan), tollgate.WithLogger(nil))
	d, _ := l.Take(context.Background(), tollgate.Request{Tenant: "t"})
	h := http.Header{}
	d.WriteHeaders(h)
	if got, want := h.Get("RateLimit-Policy"), `"pro \"plus\" \\ more";q=20;w=10`; got != want {
		t.Errorf("RateLimit-Policy = %s, want %s", got, want)
	}
}

// FuzzHeaders checks that any plan name and any figures give header values
// that are valid on the wire, in the expected shape.
func FuzzHeaders(f *testing.F) {
	f.Add("free", int64(20), 2.0, int64(5), int64(1500), false, int64(300))
	f.Add(`a"b\c`, int64(1), 1e6, int64(0), int64(0), true, int64(1))
	f.Fuzz(func(t *testing.T, name string, burst int64, rate float64, remaining, resetMs int64, denied bool, retryMs int64) {
		plan := tollgate.Plan{Name: name, Limit: tollgate.Limit{Rate: rate, Burst: burst}}
		if plan.Validate() != nil || remaining < 0 || resetMs < 0 || retryMs < 0 || resetMs > 1e12 || retryMs > 1e12 {
			return
		}
		l, err := tollgate.New(fixedStore{tollgate.Result{
			Allowed: !denied, Remaining: remaining, ResetAfter: time.Duration(resetMs) * time.Millisecond,
			RetryAfter: time.Duration(retryMs) * time.Millisecond,
		}}, tollgate.SinglePlan(plan), tollgate.WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		d, err := l.Take(context.Background(), tollgate.Request{Tenant: "t"})
		if err != nil {
			return
		}
		n := 0
		d.VisitHeaders(func(k, v string) {
			n++
			for i := 0; i < len(v); i++ {
				if c := v[i]; c < 0x20 || c > 0x7e {
					t.Fatalf("%s value %q has byte %#x", k, v, c)
				}
			}
			if k == "Retry-After" {
				if s, err := strconv.ParseInt(v, 10, 64); err != nil || s < 1 {
					t.Fatalf("Retry-After %q", v)
				}
			}
		})
		if want := 5 + map[bool]int{true: 1}[denied]; n != want {
			t.Fatalf("%d headers, want %d", n, want)
		}
	})
}

// fixedStore is a Store that answers every Take with one fixed Result.
type fixedStore struct{ r tollgate.Result }

func (s fixedStore) Take(context.Context, string, tollgate.Limit, int64) (tollgate.Result, error) {
	return s.r, nil
}

func TestHeadersOfALongPlanName(t *testing.T) {
	name := strings.Repeat(`"`, 64) // every byte escaped: the longest value there is
	plan := tollgate.Plan{Name: name, Limit: tollgate.Limit{Rate: 1000, Burst: 1000}}
	l, err := tollgate.New(newMemory(t), tollgate.SinglePlan(plan), tollgate.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	d, _ := l.Take(context.Background(), tollgate.Request{Tenant: "t", Cost: 1000})
	d2, _ := l.Take(context.Background(), tollgate.Request{Tenant: "t"})
	quoted := `"` + strings.Repeat(`\"`, 64) + `"`
	for _, d := range []tollgate.Decision{d, d2} {
		if !d.HasFigures() {
			t.Fatalf("no figures: %+v", d)
		}
		h := http.Header{}
		d.WriteHeaders(h)
		visited := http.Header{}
		d.VisitHeaders(func(k, v string) { visited[k] = []string{v} })
		want := quoted + ";r=0;t=" + strconv.FormatInt(tollgate.RetryAfterSeconds(d.ResetAfter), 10)
		if got := h.Get("RateLimit"); got != want {
			t.Errorf("RateLimit = %q, want %q", got, want)
		}
		for k := range visited {
			if h.Get(k) != visited.Get(k) {
				t.Errorf("%s: WriteHeaders %q, VisitHeaders %q", k, h.Get(k), visited.Get(k))
			}
		}
		if len(h) != len(visited) {
			t.Errorf("WriteHeaders wrote %d headers, VisitHeaders %d", len(h), len(visited))
		}
	}
}
