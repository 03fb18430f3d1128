package adapterkit_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adapterkit"
	"github.com/tollgate-go/tollgate/core/adaptertest"
	"github.com/tollgate-go/tollgate/core/storetest"
)

// TestBuildChecksTheSpec: every mistake a Spec can hold is an error of
// Build, which the adapters log once and answer with 500.
func TestBuildChecksTheSpec(t *testing.T) {
	known, _, _ := adaptertest.NewLimiter(t, adaptertest.NewResolver(t))
	unknown, _, _ := adaptertest.NewLimiter(t, tollgate.PlanResolverFunc(func(context.Context, string) (tollgate.Plan, error) {
		return adaptertest.Small, nil
	}))
	type spec = adapterkit.Spec[*http.Request]
	for _, tc := range []struct {
		name string
		spec spec
		want string // in the error; "" for none
	}{
		{"nil Limiter", spec{}, adapterkit.ErrNoLimiter.Error()},
		{"negative MaxDelay", spec{Limiter: known, MaxDelay: -time.Second}, "MaxDelay"},
		{"negative MaxHeld", spec{Limiter: known, MaxDelay: time.Second, MaxHeld: -1}, "MaxHeld"},
		{"budget no plan has", spec{Limiter: known, Budget: "reprots"}, `"reprots"`},
		{"budget that is no name", spec{Limiter: known, Budget: "no spaces"}, "Budget"},
		{"budget a plan has", spec{Limiter: known, Budget: adaptertest.Budget}, ""},
		// A resolver that does not know its plans leaves a typo to the
		// log of the first decision that meets it.
		{"budget of a resolver that can not tell", spec{Limiter: unknown, Budget: "reprots"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := adapterkit.Build(tc.spec, adapterkit.Framework{})
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Build: %v, want no error", err)
			case tc.want == "":
				if h == nil {
					t.Fatal("Build gave no Handler")
				}
			case err == nil || !strings.Contains(err.Error(), tc.want):
				t.Fatalf("Build: %v, want an error naming %s", err, tc.want)
			}
		})
	}
	if _, err := adapterkit.Build(spec{Limiter: known, Budget: "reprots"}, adapterkit.Framework{}); !errors.Is(err, tollgate.ErrInvalidLimit) {
		t.Errorf("the error of a budget no plan has is %v, want one wrapping tollgate.ErrInvalidLimit", err)
	}
}

// TestDecide checks what a Handler reads of a Call: the tenant from the
// Spec's function, else from the Header, else Call.Tenant; the route from
// the Spec's function, else Call.Route; the cost from CostFunc, else Cost.
func TestDecide(t *testing.T) {
	l, events, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(tollgate.Plan{Name: "one", Limit: tollgate.Limit{Rate: 1, Burst: 1}}))
	build := func(s adapterkit.Spec[string]) *adapterkit.Handler[string] {
		t.Helper()
		s.Limiter = l
		h, err := adapterkit.Build(s, adapterkit.Framework{})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	header := http.Header{"X-Tenant-Id": {"from-header"}}
	for _, tc := range []struct {
		name          string
		h             *adapterkit.Handler[string]
		call          adapterkit.Call
		tenant, route string
		status        int
	}{
		{"header", build(adapterkit.Spec[string]{}), adapterkit.Call{Header: header, Route: "/r", Tenant: "ignored"}, "from-header", "/r", 429},
		{"call", build(adapterkit.Spec[string]{}), adapterkit.Call{Tenant: "from-call", Route: "/r"}, "from-call", "/r", 429},
		{"functions", build(adapterkit.Spec[string]{
			Tenant: func(c string) string { return "from-" + c },
			Route:  func(c string) string { return "/" + c },
		}), adapterkit.Call{Header: header, Tenant: "ignored", Route: "ignored"}, "from-fn", "/fn", 429},
		{"none", build(adapterkit.Spec[string]{}), adapterkit.Call{Header: http.Header{}, Tenant: "ignored"}, "", "", http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.call.Context, tc.call.Method = context.Background(), http.MethodGet
			var a *adapterkit.Answer
			for range 2 {
				if a = tc.h.Decide("fn", &tc.call, adapterkit.Headers{}); a == nil {
					t.Fatal("Decide skipped the request")
				}
			}
			defer a.Release()
			if a.Status != tc.status {
				t.Fatalf("second request: status %d, want %d", a.Status, tc.status)
			}
			if tc.status == http.StatusUnauthorized {
				if !a.MissingTenant() || a.Denied() {
					t.Errorf("answer %+v: want a missing tenant", a)
				}
				return
			}
			if e := events.Last(t); e.Tenant != tc.tenant || e.Route != tc.route || e.Method != http.MethodGet || !a.Denied() {
				t.Errorf("denied %q on %s %q, want %q on GET %q", e.Tenant, e.Method, e.Route, tc.tenant, tc.route)
			}
		})
	}

	skip := build(adapterkit.Spec[string]{Skip: func(c string) bool { return c == "skip" }})
	if skip.Decide("skip", &adapterkit.Call{Context: context.Background(), Tenant: "t"}, adapterkit.Headers{}) != nil {
		t.Error("Decide did not skip a request that Skip exempts")
	}
	costly := build(adapterkit.Spec[string]{Cost: 5, CostFunc: func(string) int64 { return -3 }})
	if a := costly.Decide("c", &adapterkit.Call{Context: context.Background(), Tenant: "cost"}, adapterkit.Headers{}); a.Status != 0 {
		t.Errorf("a cost function's -3 counts as 1, and 1 token is there: status %d", a.Status)
	}
}

// TestRouteNamedWhenRead: a Limiter without Observers of its own has only
// its log to read routes, and the log reads them only of decisions that
// were not simply allowed, so the Handler asks the Spec's Route function
// for those alone, before the log writes them; with an Observer, for
// every decision.
func TestRouteNamedWhenRead(t *testing.T) {
	clock := storetest.NewClock()
	logs := &adaptertest.LogBuffer{}
	// At 1,000 tokens a second, a request that waits for one waits 1ms.
	plan := tollgate.Plan{Name: "one", Limit: tollgate.Limit{Rate: 1000, Burst: 2}}
	newLimiter := func(opts ...tollgate.Option) *tollgate.Limiter {
		opts = append([]tollgate.Option{adaptertest.WithClock(clock.Now), tollgate.WithLogger(slog.New(slog.NewTextHandler(logs, nil)))}, opts...)
		l, err := tollgate.New(storetest.NewModelStore(clock.Now), tollgate.SinglePlan(plan), opts...)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	named := 0
	spec := adapterkit.Spec[int64]{
		Route:    func(int64) string { named++; return "/users/{id}" },
		CostFunc: func(cost int64) int64 { return cost },
	}
	decide := func(h *adapterkit.Handler[int64], tenant string, cost int64) (status int, route string) {
		t.Helper()
		a := h.Decide(cost, &adapterkit.Call{Context: context.Background(), Method: http.MethodGet, Tenant: tenant}, adapterkit.Headers{})
		defer a.Release()
		return a.Status, a.Decision.Route
	}

	spec.Limiter = newLimiter()
	h, err := adapterkit.Build(spec, adapterkit.Framework{})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if status, route := decide(h, "a", 1); status != 0 || route != "" {
			t.Fatalf("allowed: status %d, route %q", status, route)
		}
	}
	if named != 0 {
		t.Errorf("the route was named %d times for simply allowed requests, want 0", named)
	}
	if status, route := decide(h, "a", 1); status != http.StatusTooManyRequests || route != "/users/{id}" || named != 1 {
		t.Errorf("denied: status %d, route %q, named %d times; want 429, /users/{id}, once", status, route, named)
	}
	if status, _ := decide(h, "b", 100); status != http.StatusInternalServerError || named != 2 {
		t.Errorf("a cost above the burst: status %d, named %d times; want 500, twice", status, named)
	}

	delayed := spec
	delayed.MaxDelay = 2 * time.Second
	delayed.Limiter = newLimiter()
	hd, err := adapterkit.Build(delayed, adapterkit.Framework{})
	if err != nil {
		t.Fatal(err)
	}
	named = 0
	decide(hd, "c", 2)
	if status, route := decide(hd, "c", 1); status != 0 || route != "/users/{id}" || named != 1 {
		t.Errorf("delayed: status %d, route %q, named %d times; want 0, /users/{id}, once", status, route, named)
	}

	for _, msg := range []string{"request throttled", "rate limiter misconfigured: request refused", "request delayed"} {
		var lines []string
		for line := range strings.SplitSeq(logs.String(), "\n") {
			if strings.Contains(line, `msg="`+msg+`"`) {
				lines = append(lines, line)
			}
		}
		if len(lines) != 1 || !strings.Contains(lines[0], " route=/users/{id} ") {
			t.Errorf("lines %q: %q, want one naming the route", msg, lines)
		}
	}

	observed := spec
	observed.Limiter = newLimiter(tollgate.WithObserver(&adaptertest.Events{}))
	ho, err := adapterkit.Build(observed, adapterkit.Framework{})
	if err != nil {
		t.Fatal(err)
	}
	named = 0
	if _, route := decide(ho, "d", 1); route != "/users/{id}" || named != 1 {
		t.Errorf("allowed, with an Observer: route %q, named %d times; want /users/{id}, once", route, named)
	}
}
