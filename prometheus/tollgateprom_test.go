package tollgateprom_test

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	tollgateprom "github.com/tollgate-go/tollgate/prometheus"
)

const hello, reports = "GET /api/hello", "POST /api/reports"

// runMix makes a known mix of decisions through two Limiters observed by
// obs: the second has a failing store and a fallback.
func runMix(t *testing.T, obs tollgate.Observer) {
	t.Helper()
	ctx := context.Background()
	store := newModel()
	l := newLimiter(t, store, tollgate.WithShadow("shadowed"), tollgate.WithObserver(obs))
	take := func(tenant, route string, cost int64, maxDelay time.Duration) tollgate.Decision {
		t.Helper()
		d, _ := l.Take(ctx, tollgate.Request{Tenant: tenant, Method: "GET", Route: route, Cost: cost, MaxDelay: maxDelay})
		return d
	}
	for range 5 { // burst 3: 3 allowed, 2 denied
		take("a", hello, 1, 0)
	}
	if d := take("a", hello, 1, 10*time.Second); d.Outcome != tollgate.OutcomeDelayed || d.Delay != time.Second {
		t.Fatalf("want a decision delayed by 1s, got %+v", d)
	}
	for range 4 { // shadowed, burst 2: 2 allowed, 2 shadow-denied
		take("s", reports, 1, 0)
	}
	take("b", reports, 2, 0) // allowed, 2 tokens
	take("a", hello, 10, 0)  // rejected: above the burst
	take("", hello, 1, 0)    // rejected: no tenant
	take("lost", hello, 1, 0)
	store.fail(kindError("circuit_open"))
	take("b", hello, 1, 0)
	take("b", hello, 1, 0)
	store.fail(context.DeadlineExceeded)
	take("b", hello, 1, 0)

	broken := newModel()
	broken.fail(kindError("circuit_open"))
	lf := newLimiter(t, broken, tollgate.WithFallbackStore(newModel()), tollgate.WithObserver(obs))
	for range 4 { // the fallback's burst 3: 3 allowed, 1 denied
		lf.Take(ctx, tollgate.Request{Tenant: "c", Route: hello})
	}
}

func TestKnownMix(t *testing.T) {
	metrics, err := tollgateprom.New()
	if err != nil {
		t.Fatal(err)
	}
	runMix(t, metrics)
	got := gather(t, metrics)
	decisions := func(plan, policy, route, outcome string) string {
		return `tollgate_decisions_total{outcome="` + outcome + `",plan="` + plan + `",policy="` + policy + `",route="` + route + `"}`
	}
	want := map[string]float64{
		decisions("small", "small", hello, "allowed"):               3 + 3, // a, then c through the fallback
		decisions("small", "small", hello, "denied"):                2 + 1,
		decisions("small", "small", hello, "delayed"):               1,
		decisions("shadowed", "shadowed", reports, "allowed"):       2,
		decisions("shadowed", "shadowed", reports, "shadow_denied"): 2,
		decisions("shadowed", "shadowed", reports, "denied"):        0,
		decisions("small", "small", reports, "allowed"):             1,
		decisions("small", "", hello, "rejected"):                   1,
		decisions("", "", hello, "rejected"):                        1,
		decisions("", "", hello, "failed_open"):                     1,
		decisions("small", "", hello, "failed_open"):                3,
		decisions("small", "", hello, "failed_closed"):              0,

		`tollgate_tokens_spent_total{plan="small",route="` + hello + `"}`:      3 + 1 + 3,
		`tollgate_tokens_spent_total{plan="small",route="` + reports + `"}`:    2,
		`tollgate_tokens_spent_total{plan="shadowed",route="` + reports + `"}`: 2,

		`tollgate_store_errors_total{kind="circuit_open"}`: 2 + 4,
		`tollgate_store_errors_total{kind="timeout"}`:      1,
		`tollgate_resolver_errors_total{}`:                 1,

		`tollgate_fallback_decisions_total{outcome="allowed"}`:       3,
		`tollgate_fallback_decisions_total{outcome="denied"}`:        1,
		`tollgate_fallback_decisions_total{outcome="delayed"}`:       0,
		`tollgate_fallback_decisions_total{outcome="shadow_denied"}`: 0,

		// Every decision but the two rejected and the resolver's failure
		// called a store: 6 + 4 + 1 + 3 + 4.
		`tollgate_store_latency_seconds_count{}`:  18,
		`tollgate_delay_seconds_count{}`:          1,
		`tollgate_delay_seconds_sum{}`:            1,
		`tollgate_delay_seconds_bucket{le="0.5"}`: 0,
		`tollgate_delay_seconds_bucket{le="1"}`:   1,
		`tollgate_label_overflow_total{}`:         0,
	}
	expect(t, got, want)
	// Nothing but these decisions was counted.
	var total float64
	for k, v := range got {
		if strings.HasPrefix(k, "tollgate_decisions_total{") {
			total += v
		}
	}
	if total != 6+4+1+2+1+3+4 { // as runMix makes them
		var keys []string
		for k := range got {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			t.Log(k, got[k])
		}
		t.Fatalf("%v decisions counted, want 21", total)
	}
}
