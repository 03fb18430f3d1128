package adapterkit_test

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adapterkit"
	"github.com/tollgate-go/tollgate/core/adaptertest"
	"github.com/tollgate-go/tollgate/core/storekit"
	"github.com/tollgate-go/tollgate/core/storetest"
)

var free = tollgate.DefaultPlans()[0]

// newLimiter returns a Limiter over the reference store, on a stopped
// clock, that gives every tenant plan.
func newLimiter(t *testing.T, plan tollgate.Plan) (*tollgate.Limiter, *storetest.Clock) {
	t.Helper()
	clock := storetest.NewClock()
	l, err := tollgate.New(storetest.NewModelStore(clock.Now), tollgate.SinglePlan(plan),
		adaptertest.WithClock(clock.Now), tollgate.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	return l, clock
}

func headersOf(d tollgate.Decision) http.Header {
	h := http.Header{}
	adapterkit.WriteHeaders(h, &d)
	return h
}

func wantHeaders(t *testing.T, h http.Header, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got := h.Values(k); len(got) != 1 || got[0] != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if len(h) != len(want) {
		t.Errorf("headers %v, want exactly %d", h, len(want))
	}
}

func TestHeaders(t *testing.T) {
	l, clock := newLimiter(t, free)
	ctx := context.Background()
	d, _ := l.Take(ctx, tollgate.Request{Tenant: "t", Cost: 3})
	epoch := clock.Now().Unix()
	wantHeaders(t, headersOf(d), map[string]string{
		"X-RateLimit-Limit":     "20",
		"X-RateLimit-Remaining": "17",
		"X-RateLimit-Reset":     strconv.FormatInt(epoch+2, 10), // 1.5s, rounded up
		"RateLimit-Policy":      `"free";q=20;w=10`,
		"RateLimit":             `"free";r=17;t=1`, // the 18th token is back in 0.5s
	})

	for i := 0; i < 17; i++ {
		l.Take(ctx, tollgate.Request{Tenant: "t"})
	}
	clock.Advance(200 * time.Millisecond)
	d, _ = l.Take(ctx, tollgate.Request{Tenant: "t"})
	if d.Allowed {
		t.Fatal("bucket should be empty")
	}
	visited := map[string]string{}
	adapterkit.VisitHeaders(&d, func(k, v string) { visited[k] = v })
	if visited["Retry-After"] != "1" { // 300ms rounds up to 1, never 0
		t.Errorf("Retry-After = %q, want 1", visited["Retry-After"])
	}
	// t is the time until more quota is available: the next token, in
	// 0.3s, not the 9.8s until the bucket is full (draft-10).
	if visited["Ratelimit"] != `"free";r=0;t=1` {
		t.Errorf("RateLimit = %q", visited["Ratelimit"])
	}
}

func TestHeadersOfSeveralPolicies(t *testing.T) {
	plan := tollgate.Plan{Name: "trial", Limit: tollgate.Limit{Rate: 5, Burst: 10}, Policies: []tollgate.Policy{
		{Quota: tollgate.Quota{Tokens: 12, Period: tollgate.Daily}},
	}}
	l, clock := newLimiter(t, plan)
	ctx := context.Background()
	clock.Advance(22 * time.Hour) // 2026-01-01 22:00 UTC: 2 hours to midnight
	d, err := l.Take(ctx, tollgate.Request{Tenant: "t", Cost: 10})
	if err != nil || !d.Allowed {
		t.Fatalf("%+v, %v", d, err)
	}
	wantHeaders(t, headersOf(d), map[string]string{
		"X-RateLimit-Limit":     "10", // the bucket, with 0 left, is closest to denying
		"X-RateLimit-Remaining": "0",
		"X-RateLimit-Reset":     strconv.FormatInt(clock.Now().Unix()+2, 10),
		"RateLimit-Policy":      `"trial";q=10;w=2, "trial-daily";q=12;w=86400`,
		"RateLimit":             `"trial";r=0;t=1, "trial-daily";r=2;t=7200`,
	})
	clock.Advance(2 * time.Second)
	d, _ = l.Take(ctx, tollgate.Request{Tenant: "t", Cost: 2})
	d, _ = l.Take(ctx, tollgate.Request{Tenant: "t", Cost: 1})
	if d.Allowed || d.Policy != "trial-daily" {
		t.Fatalf("13th token of the day: %+v, want a denial by trial-daily", d)
	}
	h := headersOf(d)
	left := 2*time.Hour - 2*time.Second
	if got, want := h.Get("Retry-After"), strconv.FormatInt(int64(left/time.Second), 10); got != want {
		t.Errorf("Retry-After = %s, want %s: the next period", got, want)
	}
	if got := h.Get("X-RateLimit-Limit"); got != "12" {
		t.Errorf("X-RateLimit-Limit = %s, want the quota's 12", got)
	}
	status, body := adapterkit.Denial(&d)
	if status != http.StatusTooManyRequests || body.Policy != "trial-daily" || body.RetryAfter != int64(left/time.Second) {
		t.Errorf("body %+v", body)
	}
	assertRetryAfterNotBeforeT(t, h)
}

// assertRetryAfterNotBeforeT checks that Retry-After is never earlier than
// the t of any policy with no quota left.
func assertRetryAfterNotBeforeT(t *testing.T, h http.Header) {
	t.Helper()
	retry, err := strconv.ParseInt(h.Get("Retry-After"), 10, 64)
	if err != nil {
		t.Fatalf("Retry-After %q", h.Get("Retry-After"))
	}
	for _, m := range regexp.MustCompile(`;r=(\d+);t=(\d+)`).FindAllStringSubmatch(h.Get("RateLimit"), -1) {
		r, _ := strconv.ParseInt(m[1], 10, 64)
		tt, _ := strconv.ParseInt(m[2], 10, 64)
		if r == 0 && retry < tt {
			t.Errorf("Retry-After %d is earlier than t=%d of an exhausted policy (%s)", retry, tt, h.Get("RateLimit"))
		}
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int64{
		time.Nanosecond: 1, 999 * time.Millisecond: 1, time.Second: 1, time.Second + 1: 2, 90 * time.Second: 90, 0: 1,
	} {
		if got := adapterkit.RetryAfterSeconds(d); got != want {
			t.Errorf("RetryAfterSeconds(%v) = %d, want %d", d, got, want)
		}
	}
}

func TestPolicyWindowIsAtLeastOneSecond(t *testing.T) {
	l, _ := newLimiter(t, tollgate.Plan{Name: "fast", Limit: tollgate.Limit{Rate: 1000, Burst: 10}}) // refills in 10ms
	d, _ := l.Take(context.Background(), tollgate.Request{Tenant: "t"})
	if got := headersOf(d).Get("RateLimit-Policy"); got != `"fast";q=10;w=1` {
		t.Errorf("RateLimit-Policy = %q, want w=1", got)
	}
}

// TestLongestPlanName: the longest valid name, with every character a
// name may hold, goes into the headers as it is.
func TestLongestPlanName(t *testing.T) {
	long := strings.Repeat("aZ09-_.:/+", 7)[:64]
	l, _ := newLimiter(t, tollgate.Plan{Name: long, Limit: free.Limit})
	d, _ := l.Take(context.Background(), tollgate.Request{Tenant: "t"})
	if got, want := headersOf(d).Get("RateLimit-Policy"), `"`+long+`";q=20;w=10`; got != want {
		t.Errorf("RateLimit-Policy = %s, want %s", got, want)
	}
}

// fixedStore is a Store that answers every Op with fixed Results, one per
// rule.
type fixedStore struct {
	results []tollgate.Result
}

func (s fixedStore) Do(_ context.Context, op *storekit.Op) error {
	op.Results = append(op.Results[:0], s.results[:len(op.Rules)]...)
	op.Allowed = true
	for _, r := range op.Results {
		op.Allowed = op.Allowed && r.Allowed
	}
	return nil
}

var sfInteger = regexp.MustCompile(`^-?\d{1,15}$`)

// FuzzHeaders checks that any plan name and any figures give header values
// that are valid on the wire, in the expected shape: printable ASCII,
// integers of at most 15 digits (RFC 9651), and a Retry-After of at least
// 1 second that is never earlier than an exhausted policy's t.
func FuzzHeaders(f *testing.F) {
	f.Add("free", int64(20), 2.0, int64(1000), int64(5), int64(1500), false, int64(300), int64(3), int64(86_000_000))
	f.Add(`a"b\c`, int64(1), 1e6, int64(1), int64(0), int64(0), true, int64(1), int64(0), int64(1))
	f.Add("big", int64(999_999_999_999_999), 1e6, int64(999_999_999_999_999), int64(999_999_999_999_999), int64(1e12), true, int64(1e12), int64(0), int64(1e12))
	f.Fuzz(func(t *testing.T, name string, burst int64, rate float64, quota, remaining, resetMs int64, denied bool, retryMs, quotaLeft, quotaMs int64) {
		plan := tollgate.Plan{Name: name, Limit: tollgate.Limit{Rate: rate, Burst: burst},
			Policies: []tollgate.Policy{{Quota: tollgate.Quota{Tokens: quota, Period: tollgate.Daily}}}}
		if plan.Validate() != nil {
			return
		}
		clamp := func(v, hi int64) int64 { return min(max(v, 0), hi) }
		remaining, quotaLeft = clamp(remaining, burst), clamp(quotaLeft, quota)
		resetMs, retryMs, quotaMs = clamp(resetMs, 1e12), clamp(retryMs, 1e12), clamp(quotaMs, 86_400_000)
		results := []tollgate.Result{
			{Allowed: !denied, Remaining: remaining, ResetAfter: time.Duration(resetMs) * time.Millisecond},
			{Allowed: true, Remaining: quotaLeft, ResetAfter: time.Duration(quotaMs) * time.Millisecond},
		}
		if denied {
			results[0].RetryAfter = time.Duration(retryMs) * time.Millisecond
		}
		l, err := tollgate.New(fixedStore{results}, tollgate.SinglePlan(plan), tollgate.WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		d, err := l.Take(context.Background(), tollgate.Request{Tenant: "t"})
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		adapterkit.WriteHeaders(h, &d)
		n := 0
		adapterkit.VisitHeaders(&d, func(k, v string) {
			n++
			if h.Get(k) != v {
				t.Fatalf("%s: WriteHeaders %q, VisitHeaders %q", k, h.Get(k), v)
			}
			for i := 0; i < len(v); i++ {
				if c := v[i]; c < 0x20 || c > 0x7e {
					t.Fatalf("%s value %q has byte %#x", k, v, c)
				}
			}
			for _, field := range regexp.MustCompile(`[;=, ]+`).Split(v, -1) {
				if strings.HasPrefix(field, `"`) || field == "" || !strings.ContainsAny(field[:1], "0123456789-") {
					continue
				}
				if !sfInteger.MatchString(field) {
					t.Fatalf("%s value %q: %q is not an RFC 9651 integer", k, v, field)
				}
			}
		})
		if want := 5 + map[bool]int{true: 1}[denied]; n != want || len(h) != want {
			t.Fatalf("%d headers visited, %d written, want %d", n, len(h), want)
		}
		if denied {
			if s, err := strconv.ParseInt(h.Get("Retry-After"), 10, 64); err != nil || s < 1 {
				t.Fatalf("Retry-After %q", h.Get("Retry-After"))
			}
		}
	})
}

// TestHeadersFollowTheQuotaPeriod: the policy values are kept per plan and
// hold for a quota's period only; a monthly quota's window is the length of
// the month the decision falls in.
func TestHeadersFollowTheQuotaPeriod(t *testing.T) {
	plan := tollgate.Plan{Name: "metered", Limit: tollgate.Limit{Rate: 1, Burst: 10}, Policies: []tollgate.Policy{
		{Quota: tollgate.Quota{Tokens: 1000, Period: tollgate.Monthly}},
	}}
	l, clock := newLimiter(t, plan)
	policy := func() string {
		t.Helper()
		d, err := l.Take(context.Background(), tollgate.Request{Tenant: "t"})
		if err != nil || !d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
		return headersOf(d).Get("RateLimit-Policy")
	}
	// The clock starts on 2026-01-01: January has 31 days, February 28.
	january := `"metered";q=10;w=10, "metered-monthly";q=1000;w=2678400`
	if got := policy(); got != january {
		t.Errorf("in January: RateLimit-Policy = %s, want %s", got, january)
	}
	clock.Advance(31 * 24 * time.Hour)
	if got, want := policy(), `"metered";q=10;w=10, "metered-monthly";q=1000;w=2419200`; got != want {
		t.Errorf("in February: RateLimit-Policy = %s, want %s", got, want)
	}
}

// TestResetHeaderRoundsUp checks X-RateLimit-Reset, the Unix second at
// which the bucket is full again, rounded up, at times and resets that do
// and do not fall on a whole second.
func TestResetHeaderRoundsUp(t *testing.T) {
	for _, offset := range []time.Duration{0, time.Nanosecond, 300 * time.Millisecond, time.Second - time.Nanosecond} {
		for _, cost := range []int64{1, 2, 3, 20} { // free refills 2 tokens a second
			l, clock := newLimiter(t, free)
			clock.Advance(offset)
			d, err := l.Take(context.Background(), tollgate.Request{Tenant: "t", Cost: cost})
			if err != nil || !d.Allowed {
				t.Fatalf("offset %v, cost %d: %+v, %v", offset, cost, d, err)
			}
			full := clock.Now().Add(time.Duration(cost) * 500 * time.Millisecond)
			want := full.Unix()
			if full.Nanosecond() > 0 {
				want++
			}
			if got := headersOf(d).Get("X-RateLimit-Reset"); got != strconv.FormatInt(want, 10) {
				t.Errorf("offset %v, cost %d: X-RateLimit-Reset = %s, want %d", offset, cost, got, want)
			}
		}
	}
}
