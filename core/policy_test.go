package tollgate_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adapterkit"
	"github.com/tollgate-go/tollgate/core/memory"
)

// trial is the examples' trial plan: bursts of 10 at 5 a second, 30 a day,
// and a reports budget of 50 tokens an hour.
var trial = tollgate.Plan{Name: "trial", Limit: tollgate.Limit{Rate: 5, Burst: 10}, Policies: []tollgate.Policy{
	{Quota: perDay(30)},
	{Budget: "reports", Limit: tollgate.Limit{Rate: 50.0 / 3600, Burst: 50}},
}}

func TestPlanValidationNamesTheField(t *testing.T) {
	bucket := tollgate.Limit{Rate: 1, Burst: 5}
	cases := []struct {
		plan tollgate.Plan
		want string
	}{
		{tollgate.Plan{Name: "p", Limit: bucket, Policies: []tollgate.Policy{{}}}, "exactly one of Limit, Quota and InFlight"},
		{tollgate.Plan{Name: "p", Limit: bucket, Policies: []tollgate.Policy{{Limit: bucket, Quota: perDay(5)}}}, "exactly one of Limit, Quota and InFlight"},
		{tollgate.Plan{Name: "p", Limit: bucket, Policies: []tollgate.Policy{{Limit: bucket}}}, "Name must be set"},
		{tollgate.Plan{Name: "p", Limit: bucket, Policies: []tollgate.Policy{{Quota: perDay(0)}}}, "Quota.Tokens"},
		{tollgate.Plan{Name: "p", Limit: bucket, Policies: []tollgate.Policy{{Name: "a", Quota: perDay(5)}, {Name: "b", Quota: perDay(9)}}}, "share its state"},
		{tollgate.Plan{Name: "p", Limit: bucket, Policies: []tollgate.Policy{{Name: "p", Quota: perDay(5)}}}, "used twice"},
		{tollgate.Plan{Name: "p", Limit: bucket, Policies: []tollgate.Policy{{Budget: "bad budget", Limit: bucket}}}, "Budget"},
		{tollgate.Plan{Name: "p", Limit: bucket, Policies: []tollgate.Policy{{Budget: "r", Limit: tollgate.Limit{Rate: 1}}}}, "Burst"},
		{tollgate.Plan{Name: "p", Limit: tollgate.Limit{Rate: 1e6, Burst: 3e15}}, "Burst"},
		{tollgate.Plan{Name: "p", Limit: bucket, Policies: make([]tollgate.Policy, 17)}, "at most 16"},
	}
	for _, c := range cases {
		err := c.plan.Validate()
		if !errors.Is(err, tollgate.ErrInvalidLimit) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: Validate() = %v, want an ErrInvalidLimit saying %q", c.plan.Policies, err, c.want)
		}
	}
	if err := trial.Validate(); err != nil {
		t.Errorf("trial: %v", err)
	}
}

// TestQuotaADay is the examples' umbrella tenant: exactly 30 requests in a
// UTC day, bursts of 10 at 5 a second along the way, then denials until
// midnight that name the daily policy.
func TestQuotaADay(t *testing.T) {
	l, clock := newModelLimiter(t, tollgate.SinglePlan(trial))
	ctx := context.Background()
	clock.Advance(9 * time.Hour) // 09:00 UTC
	allowed := 0
	for i := 0; i < 200; i++ {
		d, err := l.Take(ctx, tollgate.Request{Tenant: "umbrella"})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			allowed++
		} else if allowed < 30 && d.Policy != "trial" {
			t.Fatalf("request %d denied by %q before the quota ran out", i, d.Policy)
		}
		clock.Advance(100 * time.Millisecond) // 10 a second: twice the rate
	}
	if allowed != 30 {
		t.Fatalf("%d requests allowed in the day, want exactly 30", allowed)
	}
	clock.Advance(time.Hour)
	d, _ := l.Take(ctx, tollgate.Request{Tenant: "umbrella"})
	midnight := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	if d.Allowed || d.Policy != "trial-daily" || d.RetryAfter != midnight.Sub(clock.Now()) {
		t.Fatalf("after the quota: %+v, want a denial by trial-daily until midnight (%v)", d, midnight.Sub(clock.Now()))
	}
	// The bucket, full again, spent nothing on the denials.
	if r := d.Results(); r[0].Remaining != 10 || !r[0].Allowed {
		t.Fatalf("bucket result on a quota denial %+v, want full and allowing", r[0])
	}
	clock.Advance(midnight.Sub(clock.Now()))
	if d, _ = l.Take(ctx, tollgate.Request{Tenant: "umbrella"}); !d.Allowed {
		t.Fatalf("at midnight: %+v", d)
	}
}

func TestBudgetDeniesWhileThePlanAllows(t *testing.T) {
	startup := tollgate.Plan{Name: "startup", Limit: tollgate.Limit{Rate: 10, Burst: 100}, Policies: []tollgate.Policy{
		{Budget: "reports", Limit: tollgate.Limit{Rate: 50.0 / 3600, Burst: 50}},
	}}
	l, _ := newModelLimiter(t, tollgate.SinglePlan(startup))
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		if d, _ := l.Take(ctx, tollgate.Request{Tenant: "initech", Cost: 10, Budget: "reports"}); !d.Allowed {
			t.Fatalf("report %d: %+v", i+1, d)
		}
	}
	d, _ := l.Take(ctx, tollgate.Request{Tenant: "initech", Cost: 10, Budget: "reports"})
	if d.Allowed || d.Policy != "startup-reports" {
		t.Fatalf("6th report: %+v, want a denial by startup-reports", d)
	}
	if d.Results()[0].Remaining != 50 {
		t.Fatalf("the plan's bucket after 5 reports and a denial: %+v, want 50 left", d.Results()[0])
	}
	if d, _ := l.Take(ctx, tollgate.Request{Tenant: "initech"}); !d.Allowed || len(d.Policies()) != 1 {
		t.Fatalf("GET without the budget: %+v", d)
	}
	// Another tenant's budget is its own.
	if d, _ := l.Take(ctx, tollgate.Request{Tenant: "globex", Cost: 10, Budget: "reports"}); !d.Allowed {
		t.Fatalf("globex's first report: %+v", d)
	}
	// A budget the plan does not know adds no limit.
	if d, _ := l.Take(ctx, tollgate.Request{Tenant: "initech", Budget: "exports"}); !d.Allowed || len(d.Policies()) != 1 {
		t.Fatalf("unknown budget: %+v", d)
	}
	// Cost above the budget's burst can never pass: a configuration error.
	if _, err := l.Take(ctx, tollgate.Request{Tenant: "initech", Cost: 51, Budget: "reports"}); !errors.Is(err, tollgate.ErrInvalidLimit) ||
		!strings.Contains(err.Error(), "startup-reports") {
		t.Fatalf("cost 51 on a budget of 50: %v", err)
	}
}

func TestPlanChangeMidPeriodKeepsTheQuotaUsed(t *testing.T) {
	small := tollgate.Plan{Name: "small", Limit: tollgate.Limit{Rate: 100, Burst: 100}, Policies: []tollgate.Policy{{Quota: perDay(10)}}}
	large := tollgate.Plan{Name: "large", Limit: tollgate.Limit{Rate: 100, Burst: 100}, Policies: []tollgate.Policy{{Quota: perDay(15)}}}
	resolver, err := tollgate.NewStaticResolver([]tollgate.Plan{small, large}, "small", nil)
	if err != nil {
		t.Fatal(err)
	}
	l, _ := newModelLimiter(t, resolver)
	ctx := context.Background()
	if d, _ := l.Take(ctx, tollgate.Request{Tenant: "t", Cost: 8}); !d.Allowed {
		t.Fatal(d)
	}
	resolver.Assign("t", "large")
	d, _ := l.Take(ctx, tollgate.Request{Tenant: "t", Cost: 1})
	if !d.Allowed || d.Results()[1].Remaining != 6 {
		t.Fatalf("after the upgrade: %+v, want 15-8-1 = 6 left today", d.Results())
	}
	if _, err := l.Take(ctx, tollgate.Request{Tenant: "t", Cost: 16}); !errors.Is(err, tollgate.ErrInvalidLimit) {
		t.Fatalf("cost above the quota: %v", err)
	}
}

func TestInspectAndReset(t *testing.T) {
	l, clock := newModelLimiter(t, tollgate.SinglePlan(trial))
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		clock.Advance(2 * time.Second) // the bucket refills 10 tokens
		if d, _ := l.Take(ctx, tollgate.Request{Tenant: "t", Cost: 10, Budget: "reports"}); !d.Allowed {
			t.Fatalf("report %d: %+v", i+1, d)
		}
	}
	d, err := l.Inspect(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, p := range d.Policies() {
		names = append(names, p.Name)
	}
	if got := strings.Join(names, ","); got != "trial,trial-daily,trial-reports" {
		t.Fatalf("inspected policies %s", got)
	}
	r := d.Results()
	if r[0].Remaining != 0 || r[1].Remaining != 0 || r[2].Remaining != 20 || d.Allowed {
		t.Fatalf("inspect: allowed %v %+v", d.Allowed, r)
	}
	again, _ := l.Inspect(ctx, "t")
	if again.Results()[2].Remaining != 20 {
		t.Fatal("Inspect spent tokens")
	}
	if err := l.Reset(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	d, _ = l.Inspect(ctx, "t")
	if r := d.Results(); r[0].Remaining != 10 || r[1].Remaining != 30 || r[2].Remaining != 50 || !d.Allowed {
		t.Fatalf("after Reset: %+v", r)
	}
}

// TestPlanChangeAcrossTimeZonesKeepsTheQuotaUsed moves a tenant to a plan
// whose day starts in another time zone: what it used today still counts.
func TestPlanChangeAcrossTimeZonesKeepsTheQuotaUsed(t *testing.T) {
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Skipf("no time zone database: %v", err)
	}
	utcDay := tollgate.Plan{Name: "utc", Limit: tollgate.Limit{Rate: 100, Burst: 100}, Policies: []tollgate.Policy{{Quota: perDay(200)}}}
	tokyoDay := tollgate.Plan{Name: "tokyo", Limit: tollgate.Limit{Rate: 100, Burst: 100},
		Policies: []tollgate.Policy{{Quota: tollgate.Quota{Tokens: 200, Period: tollgate.Daily, Location: tokyo}}}}
	resolver, err := tollgate.NewStaticResolver([]tollgate.Plan{utcDay, tokyoDay}, "utc", nil)
	if err != nil {
		t.Fatal(err)
	}
	l, clock := newModelLimiter(t, resolver)
	clock.Advance(10 * time.Hour) // 10:00 UTC, 19:00 in Tokyo
	ctx := context.Background()
	allowed := 0
	for i := 0; i < 300; i++ {
		clock.Advance(10 * time.Millisecond)
		if d, _ := l.Take(ctx, tollgate.Request{Tenant: "t"}); d.Allowed {
			allowed++
		}
	}
	resolver.Assign("t", "tokyo")
	for i := 0; i < 300; i++ {
		clock.Advance(10 * time.Millisecond)
		if d, _ := l.Take(ctx, tollgate.Request{Tenant: "t"}); d.Allowed {
			allowed++
		}
	}
	if allowed != 200 {
		t.Fatalf("%d requests allowed in one day across a change of time zone, want 200", allowed)
	}
}

// TestResetClearsPoliciesOfAnOldPlan exhausts a budget under one plan, moves
// the tenant to a plan without that budget, resets it, and moves it back:
// the budget is full again.
func TestResetClearsPoliciesOfAnOldPlan(t *testing.T) {
	exports := tollgate.Plan{Name: "exports", Limit: tollgate.Limit{Rate: 100, Burst: 100},
		Policies: []tollgate.Policy{{Budget: "reports", Limit: tollgate.Limit{Rate: 1.0 / 3600, Burst: 2}}}}
	plain := tollgate.Plan{Name: "plain", Limit: tollgate.Limit{Rate: 100, Burst: 100}}
	resolver, err := tollgate.NewStaticResolver([]tollgate.Plan{exports, plain}, "exports", nil)
	if err != nil {
		t.Fatal(err)
	}
	l, _ := newModelLimiter(t, resolver)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		l.Take(ctx, tollgate.Request{Tenant: "t", Budget: "reports"})
	}
	if d, _ := l.Take(ctx, tollgate.Request{Tenant: "t", Budget: "reports"}); d.Allowed {
		t.Fatal("the budget of 2 allowed a 4th report")
	}
	resolver.Assign("t", "plain")
	if err := l.Reset(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	resolver.Unassign("t")
	if d, _ := l.Take(ctx, tollgate.Request{Tenant: "t", Budget: "reports"}); !d.Allowed || d.Results()[1].Remaining != 1 {
		t.Fatalf("after Reset under another plan, the budget: %+v", d.Results())
	}
}

// FuzzPlan: a plan of any figures, as an application's database may hold
// them, either fails New with ErrInvalidLimit and a message naming what
// is wrong, or decides a request of any cost: with figures within the
// plan's, and headers of printable ASCII.
func FuzzPlan(f *testing.F) {
	f.Add("trial", 5.0, int64(10), int64(30), false, 0, int64(0), "reports", int64(1))
	f.Add("big", 1e6, int64(999_999_999_999_999), int64(999_999_999_999_999), true, 28, int64(1_000_000), "", int64(999_999_999_999_999))
	f.Add("slow", 1e-9, int64(1), int64(1), true, 0, int64(3), "b", int64(2))
	f.Add("", 0.0, int64(0), int64(-1), false, -1, int64(-1), "a b", int64(-5))
	f.Fuzz(func(t *testing.T, name string, rate float64, burst, tokens int64, monthly bool, anchor int, inFlight int64, budget string, cost int64) {
		p := tollgate.Plan{Name: name, Limit: tollgate.Limit{Rate: rate, Burst: burst}}
		if tokens != 0 {
			q := tollgate.Quota{Tokens: tokens, Period: tollgate.Daily}
			if monthly {
				q.Period, q.AnchorDay = tollgate.Monthly, anchor
			}
			p.Policies = append(p.Policies, tollgate.Policy{Quota: q})
		}
		if inFlight != 0 {
			p.Policies = append(p.Policies, tollgate.Policy{InFlight: inFlight})
		}
		if budget != "" {
			p.Policies = append(p.Policies, tollgate.Policy{Budget: budget, Limit: tollgate.Limit{Rate: rate / 2, Burst: burst}})
		}
		store := memory.New(memory.WithSweepInterval(0))
		defer store.Close()
		l, err := tollgate.New(store, tollgate.SinglePlan(p), tollgate.WithLogger(nil))
		if err != nil {
			if !errors.Is(err, tollgate.ErrInvalidLimit) || !strings.Contains(err.Error(), ": ") {
				t.Fatalf("plan %+v: %v, want ErrInvalidLimit saying why", p, err)
			}
			return
		}
		ctx := context.Background()
		req := tollgate.Request{Tenant: "t", Cost: cost, Budget: budget}
		d, err := l.Take(ctx, req)
		if err != nil {
			wantPlan := name
			if cost < 0 {
				wantPlan = "" // refused before the plan is resolved
			}
			if !errors.Is(err, tollgate.ErrInvalidLimit) || d.Plan != wantPlan {
				t.Fatalf("plan %+v, cost %d: %+v, %v; want ErrInvalidLimit for the cost", p, cost, d, err)
			}
			return
		}
		defer l.Release(ctx, &d)
		if !d.Allowed || d.Remaining < 0 || d.RetryAfter != 0 || d.ResetAfter < 0 {
			t.Fatalf("plan %+v, cost %d: the first request: %+v", p, cost, d)
		}
		for i, r := range d.Results() {
			if r.Remaining < 0 || r.ResetAfter < 0 || r.RetryAfter != 0 {
				t.Fatalf("plan %+v, cost %d: policy %q: %+v", p, cost, d.Policies()[i].Name, r)
			}
		}
		h := http.Header{}
		adapterkit.WriteHeaders(h, &d)
		if len(h) == 0 {
			t.Fatalf("plan %+v: no headers for %+v", p, d)
		}
		for key, values := range h {
			for _, v := range values {
				for i := 0; i < len(v); i++ {
					if v[i] < 0x20 || v[i] > 0x7e {
						t.Fatalf("plan %+v: header %s: %q", p, key, v)
					}
				}
			}
		}
	})
}
