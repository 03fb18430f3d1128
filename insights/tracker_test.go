package insights_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/storetest"
	"github.com/tollgate-go/tollgate/insights"
)

// A clock is a test clock that moves only when told.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock {
	c := &clock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *clock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }
func (c *clock) set(t time.Time)     { c.ns.Store(t.UnixNano()) }

// monday is 09:00:30 UTC on a Monday, 30 seconds into a 5-minute bucket.
var monday = time.Date(2026, 11, 30, 9, 0, 30, 0, time.UTC)

func newTracker(t *testing.T, c *clock, opts ...insights.Option) *insights.Tracker {
	t.Helper()
	opts = append([]insights.Option{insights.WithClock(c.now), insights.WithPlans(tollgate.DefaultPlans())}, opts...)
	tr, err := insights.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// newLimiter returns a Limiter on the default plans (acme enterprise,
// globex growth, initech startup, anyone else free) that tells tr of its
// decisions, its store on the clock c.
func newLimiter(t *testing.T, c *clock, tr *insights.Tracker, opts ...tollgate.Option) *tollgate.Limiter {
	t.Helper()
	plans, err := tollgate.NewStaticResolver(tollgate.DefaultPlans(), "free",
		map[string]string{"acme": "enterprise", "globex": "growth", "initech": "startup"})
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]tollgate.Option{tollgate.WithObserver(tr), tollgate.WithLogger(nil)}, opts...)
	l, err := tollgate.New(newModelStore(c), plans, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// newModelStore returns the reference store on the clock c: the memory
// store's decisions, made slowly.
func newModelStore(c *clock) *storetest.ModelStore { return storetest.NewModelStore(c.now) }

// tally is what the test itself saw of a flood.
type tally struct{ allowed, throttled, shadow int64 }

// flood sends n requests of tenant on route through l and counts the answers.
func flood(t *testing.T, l *tollgate.Limiter, tenant, route string, cost int64, n int) tally {
	t.Helper()
	var got tally
	method := "GET"
	if m, _, ok := strings.Cut(route, " "); ok {
		method = m // a net/http pattern, "POST /api/reports"
	}
	for range n {
		d, err := l.Take(context.Background(), tollgate.Request{Tenant: tenant, Cost: cost, Method: method, Route: route})
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case d.Shadow:
			got.shadow++
		case d.Allowed:
			got.allowed++
		default:
			got.throttled++
		}
	}
	return got
}

func candidates(t *testing.T, tr *insights.Tracker, w insights.Window) insights.Report {
	t.Helper()
	rep, err := tr.Candidates(context.Background(), w, 50)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestAFloodingTenantComesFirst(t *testing.T) {
	c := newClock(monday)
	tr := newTracker(t, c)
	l := newLimiter(t, c, tr)

	flood(t, l, "initech", "/api/hello", 1, 105) // startup: burst 100, a few throttled
	loopy := flood(t, l, "loopy", "/api/hello", 1, 300)
	c.add(time.Second)
	loopy2 := flood(t, l, "loopy", "/api/reports", 10, 5)
	if loopy.throttled < 270 || loopy2.throttled != 5 {
		t.Fatalf("the flood was not throttled as planned: %+v, %+v", loopy, loopy2)
	}

	rep := candidates(t, tr, insights.LastHour)
	if rep.Fleet || len(rep.Candidates) != 2 {
		t.Fatalf("report: fleet %v, %d candidates, want this replica's 2", rep.Fleet, len(rep.Candidates))
	}
	top := rep.Candidates[0]
	if top.Tenant != "loopy" || top.Plan != "free" || rep.Candidates[1].Tenant != "initech" {
		t.Fatalf("order: %s (%s), %s; want loopy (free), initech", top.Tenant, top.Plan, rep.Candidates[1].Tenant)
	}
	throttled := loopy.throttled + loopy2.throttled
	if top.ThrottledRequests != throttled || top.ThrottledTokens != loopy.throttled+10*loopy2.throttled || top.Overcount != 0 {
		t.Fatalf("loopy: %d throttled (%d tokens, overcount %d), want %d (%d tokens, 0)",
			top.ThrottledRequests, top.ThrottledTokens, top.Overcount, throttled, loopy.throttled+50)
	}
	// Every request, those before its first throttled one too.
	if top.Requests != 305 || top.ThrottledShare != float64(throttled)/305 {
		t.Fatalf("loopy: %d requests, share %v; want 305, %v", top.Requests, top.ThrottledShare, float64(throttled)/305)
	}
	// Every token loopy asked for, before it was tracked too: 300 in the
	// first second, 350 in the minute; free (22 a second) and startup (110)
	// are too small.
	if top.PeakTokensPerSecond != 300 || top.PeakTokensPerMinute != 350 {
		t.Fatalf("loopy peaks %d/s, %d/min; want 300, 350", top.PeakTokensPerSecond, top.PeakTokensPerMinute)
	}
	if top.SuggestedPlan != "growth" || top.OutgrowsPlans {
		t.Fatalf("loopy: suggested %q (outgrows %v), want growth", top.SuggestedPlan, top.OutgrowsPlans)
	}
	if len(top.Routes) != 2 || top.Routes[0].Route != "/api/hello" || top.Routes[0].Throttled != loopy.throttled ||
		top.Routes[1].Route != "/api/reports" || top.Routes[1].Throttled != 5 || top.Routes[0].Method != "GET" {
		t.Fatalf("loopy routes %+v", top.Routes)
	}
	if !top.FirstSeen.Equal(monday) || !top.LastSeen.Equal(monday.Add(time.Second)) {
		t.Fatalf("loopy seen %v to %v", top.FirstSeen, top.LastSeen)
	}
	if len(top.Series) != 13 || top.Series[12].Throttled != throttled || !top.Series[12].Start.Equal(monday.Truncate(5*time.Minute)) {
		t.Fatalf("loopy series: %d points, last %+v", len(top.Series), top.Series[len(top.Series)-1])
	}
	if rep.ThrottledTokens != top.ThrottledTokens+rep.Candidates[1].ThrottledTokens {
		t.Fatalf("window total %d", rep.ThrottledTokens)
	}
	// initech asked for 105 tokens at once on a burst of 100: growth.
	if s := rep.Candidates[1].SuggestedPlan; s != "growth" {
		t.Fatalf("initech, 5 over its burst, suggested %q; want growth", s)
	}
}

func TestWindowsHoldTheirBuckets(t *testing.T) {
	c := newClock(monday)
	tr := newTracker(t, c)
	deny := func(tenant string, n int) {
		for range n {
			insights.Record(tr, insights.Event{Tenant: tenant, Plan: "free", Outcome: "denied", Cost: 1, Route: "/x"})
		}
	}
	deny("lastweek", 50) // Monday 09:00
	c.add(5 * 24 * time.Hour)
	deny("yesterday", 40) // Saturday 09:00
	c.add(22 * time.Hour)
	deny("earlier", 30) // Sunday 07:00
	c.add(100 * time.Minute)
	deny("now", 20) // Sunday 08:40
	c.add(15 * time.Minute)
	deny("now", 5) // Sunday 08:55

	names := func(r insights.Report) string {
		var s []string
		for _, c := range r.Candidates {
			s = append(s, fmt.Sprintf("%s:%d", c.Tenant, c.ThrottledRequests))
		}
		return strings.Join(s, " ")
	}
	for w, want := range map[insights.Window]string{
		insights.LastHour: "now:25",
		insights.LastDay:  "yesterday:40 earlier:30 now:25",
		insights.LastWeek: "lastweek:50 yesterday:40 earlier:30 now:25",
	} {
		rep := candidates(t, tr, w)
		if got := names(rep); got != want {
			t.Errorf("%s: %s; want %s", w, got, want)
		}
		if rep.Step != int64(w.Step()/time.Second) || !rep.To.Equal(c.now()) {
			t.Errorf("%s: step %d, to %v", w, rep.Step, rep.To)
		}
	}
	// The series put each request in its bucket: "now" in the last two
	// five-minute buckets, 20 and 5.
	hour := candidates(t, tr, insights.LastHour)
	s := hour.Candidates[0].Series
	if s[len(s)-1].Throttled != 5 || s[len(s)-4].Throttled != 20 || len(s) != 13 {
		t.Fatalf("last-hour series %+v", s)
	}
	week := candidates(t, tr, insights.LastWeek)
	for _, cand := range week.Candidates {
		var sum int64
		for _, p := range cand.Series {
			sum += p.Throttled
		}
		if sum != cand.ThrottledRequests || len(cand.Series) != 29 {
			t.Fatalf("%s: series sums to %d over %d points, want %d over 29", cand.Tenant, sum, len(cand.Series), cand.ThrottledRequests)
		}
	}
	if lw := week.Candidates[0]; !lw.Series[0].Start.Equal(week.From) || lw.Series[4].Throttled != 50 { // Monday 09:00 is in the fifth six-hour bucket, from Sunday 06:00
		t.Fatalf("lastweek series starts %v (from %v): %+v", lw.Series[0].Start, week.From, lw.Series[:5])
	}
	// 30 hours later, last week's tenant has left every window.
	c.add(30 * time.Hour)
	if got := names(candidates(t, tr, insights.LastWeek)); strings.Contains(got, "lastweek") {
		t.Fatalf("8 days later: %s", got)
	}
}

func TestNearLimitAndShadow(t *testing.T) {
	c := newClock(monday)
	tr := newTracker(t, c)
	l := newLimiter(t, c, tr, tollgate.WithShadow("free"))

	// Shadow mode: nothing is denied, but the tracker sees the throttles.
	got := flood(t, l, "loopy", "/api/hello", 1, 60)
	if got.throttled != 0 || got.shadow < 30 {
		t.Fatalf("shadow flood %+v", got)
	}
	// initech (startup, burst 100) runs close to its limit: the requests
	// that leave at most 10 tokens are near the limit; then it is denied.
	near := flood(t, l, "initech", "/api/hello", 1, 101)
	if near.throttled < 1 {
		t.Fatalf("initech %+v", near)
	}
	more := flood(t, l, "initech", "/api/hello", 1, 0)
	_ = more

	rep := candidates(t, tr, insights.LastHour)
	byTenant := map[string]insights.Candidate{}
	for _, c := range rep.Candidates {
		byTenant[c.Tenant] = c
	}
	loopy := byTenant["loopy"]
	if loopy.ShadowDenied != got.shadow || loopy.ThrottledRequests != got.shadow {
		t.Fatalf("loopy: %d throttled, %d shadow; want %d both", loopy.ThrottledRequests, loopy.ShadowDenied, got.shadow)
	}
	if _, ok := byTenant["initech"]; !ok {
		t.Fatal("initech, denied once, is not a candidate")
	}

	// Near-limit requests count for a tracked tenant: deny once, then allow
	// with little left.
	obs := func(outcome string, remaining int64) {
		insights.Record(tr, insights.Event{Tenant: "edge", Plan: "growth", Outcome: outcome, Cost: 1, Remaining: remaining, Capacity: 500})
	}
	obs("allowed", 1) // not tracked yet: counted in the sketches
	obs("allowed", 499)
	obs("denied", 0)
	obs("allowed", 50) // 10 %: near
	obs("delayed", 10)
	obs("allowed", 51)      // above 10 %
	obs("failed_open", 0)   // no figures: a request, not near
	obs("rejected", 0)      // never decided: not counted
	obs("failed_closed", 0) // a request
	found := false
	for _, c := range candidates(t, tr, insights.LastHour).Candidates {
		found = found || c.Tenant == "edge"
		if c.Tenant == "edge" && (c.NearLimitRequests != 3 || c.Requests != 8 || c.ThrottledRequests != 1) {
			t.Fatalf("edge: %d near, %d requests, %d throttled; want 3, 8, 1", c.NearLimitRequests, c.Requests, c.ThrottledRequests)
		}
	}
	if !found {
		t.Fatal("edge is not a candidate")
	}
}

func TestMillionTenantsStayUnderK(t *testing.T) {
	// A million tenants throttled once each in one hour, and one heavy
	// tenant throttled 20,000 times among them; then 100,000 more over
	// the week, so that every tier fills. Under the race detector a tenth
	// of that: make test runs this package again without it
	// (test-allocs), with the million.
	const k = 1000
	tenants := 1_000_000
	if raceEnabled {
		tenants = 100_000
	}
	c := newClock(monday)
	tr := newTracker(t, c, insights.WithCapacity(k))
	deny := func(n int, span time.Duration) {
		step := span / time.Duration(n)
		for i := range n {
			insights.Record(tr, insights.Event{Tenant: "tenant-" + strconv.Itoa(i), Plan: "free", Outcome: "denied", Cost: 1})
			if i%50 == 0 {
				insights.Record(tr, insights.Event{Tenant: "heavy", Plan: "free", Outcome: "denied", Cost: 1})
			}
			c.add(step)
		}
	}
	check := func(when string) {
		insights.Settle(tr)
		st := tr.Stats()
		if st.MaxEntries > k || st.K != k || st.Buckets > 1+13+26+30 { // the open one, then each tier's closed and current
			t.Fatalf("%s: %+v: a bucket holds more than k, or too many buckets", when, st)
		}
		t.Logf("%s: %+v", when, st)
		for _, w := range insights.Windows {
			rep := candidates(t, tr, w)
			if rep.Candidates[0].Tenant != "heavy" {
				t.Fatalf("%s, %s: first is %s", when, w, rep.Candidates[0].Tenant)
			}
		}
	}
	deny(tenants, time.Hour)
	check(strconv.Itoa(tenants) + " tenants in an hour")
	deny(100_000, 7*24*time.Hour)
	check("100k more over a week")
}

func TestObserveAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; make test runs this without it")
	}
	c := newClock(monday)
	tr := newTracker(t, c)
	ctx := context.Background()
	l := newLimiter(t, c, tr)
	var throttled, allowed tollgate.Decision
	for throttled.Outcome() != "denied" { // loopy enters the summary
		throttled, _ = l.Take(ctx, tollgate.Request{Tenant: "loopy", Method: "GET", Route: "GET /api/hello"})
	}
	allowed, _ = l.Take(ctx, tollgate.Request{Tenant: "quiet", Route: "GET /api/hello"})
	for name, d := range map[string]*tollgate.Decision{"throttled, tracked": &throttled, "allowed, not tracked": &allowed} {
		if n := testing.AllocsPerRun(1000, func() { tr.Observe(ctx, d) }); n != 0 {
			t.Errorf("%s: %v allocations per Observe", name, n)
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	c := newClock(monday)
	tr := newTracker(t, c, insights.WithCapacity(16))
	l := newLimiter(t, c, tr)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				flood(t, l, fmt.Sprintf("t%d", (g*7+i)%40), "/r", 1, 1)
				if i%100 == 0 {
					c.add(time.Minute)
				}
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			for _, w := range insights.Windows {
				_ = candidates(t, tr, w)
			}
			_ = tr.Stats()
		}
	})
	wg.Wait()
	if st := tr.Stats(); st.MaxEntries > 16 {
		t.Fatalf("%+v", st)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	for name, c := range map[string]struct {
		opt  insights.Option
		want string
	}{
		"k 0":          {insights.WithCapacity(0), "WithCapacity"},
		"k huge":       {insights.WithCapacity(insights.MaxCapacity + 1), "WithCapacity"},
		"near 1":       {insights.WithNearLimit(1), "WithNearLimit"},
		"near NaN":     {insights.WithNearLimit(nan()), "WithNearLimit"},
		"bad plan":     {insights.WithPlans([]tollgate.Plan{{Name: "x y", Limit: tollgate.Limit{Rate: 1, Burst: 1}}}), "WithPlans"},
		"nil exchange": {insights.WithExchange((*nilExchange)(nil), "a"), "WithExchange"},
		"long replica": {insights.WithExchange(&nilExchange{}, strings.Repeat("r", 200)), "replica"},
		"flush 0":      {func() insights.Option { return insights.WithFlushInterval(0) }(), ""},
	} {
		opts := []insights.Option{c.opt}
		if name == "flush 0" {
			opts = append(opts, insights.WithExchange(&nilExchange{}, "a"))
			c.want = "WithFlushInterval"
		}
		_, err := insights.New(opts...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error naming %s", name, err, c.want)
		}
	}
	if _, err := (&insights.Tracker{}).Candidates(context.Background(), "2h", 1); err == nil || !strings.Contains(err.Error(), "window") {
		t.Errorf("unknown window: %v", err)
	}
}

func nan() float64 { var z float64; return z / z }

// nilExchange publishes nowhere and has nothing to collect.
type nilExchange struct{}

func (*nilExchange) Publish(context.Context, string, []insights.BucketSummary) error { return nil }
func (*nilExchange) Collect(_ context.Context, b []string) ([]map[string][]byte, error) {
	return make([]map[string][]byte, len(b)), nil
}

// TestInFlightRefusals: a tenant turned away for running too many requests
// at once is a candidate like any other, its in-flight refusals counted
// apart.
func TestInFlightRefusals(t *testing.T) {
	c := newClock(monday)
	tr := newTracker(t, c)
	l := newInFlightLimiter(t, c, tr, 2)
	ctx := context.Background()
	var running []tollgate.Decision
	for range 2 {
		d, err := l.Take(ctx, tollgate.Request{Tenant: "exporter", Route: "/api/export"})
		if err != nil || !d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
		running = append(running, d)
	}
	if got := flood(t, l, "exporter", "/api/export", 1, 7); got.throttled != 7 {
		t.Fatalf("%d of 7 refused with two running", got.throttled)
	}
	for i := range running {
		if err := l.Release(ctx, &running[i]); err != nil {
			t.Fatal(err)
		}
	}
	flood(t, l, "exporter", "/api/export", 1, 2) // the slots are free again
	rep := candidates(t, tr, insights.LastHour)
	if len(rep.Candidates) != 1 {
		t.Fatalf("%d candidates, want exporter", len(rep.Candidates))
	}
	if c := rep.Candidates[0]; c.Tenant != "exporter" || c.ThrottledRequests != 7 || c.InFlightRefusals != 7 || c.Requests != 11 {
		t.Fatalf("candidate %+v: want exporter with 7 of 11 requests throttled, all 7 for want of a slot", c)
	}
}
