package adapterkit_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adapterkit"
	"github.com/tollgate-go/tollgate/core/adaptertest"
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
