package tollgateotel_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	tollgateotel "github.com/tollgate-go/tollgate/otel"
)

func TestKnownMix(t *testing.T) {
	metrics, reader := newMetrics(t)
	runMix(t, metrics)
	got := points(t, reader)
	decisions := func(plan, policy, route, outcome string) string {
		return `tollgate.decisions{outcome="` + outcome + `",plan="` + plan + `",policy="` + policy + `",route="` + route + `"}`
	}
	expect(t, got, map[string]float64{
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

		`tollgate.tokens.spent{plan="small",route="` + hello + `"}`:      3 + 1 + 3,
		`tollgate.tokens.spent{plan="small",route="` + reports + `"}`:    2,
		`tollgate.tokens.spent{plan="shadowed",route="` + reports + `"}`: 2,

		`tollgate.store.errors{kind="circuit_open"}`: 2 + 4,
		`tollgate.store.errors{kind="timeout"}`:      1,
		`tollgate.resolver.errors{}`:                 1,

		`tollgate.fallback.decisions{outcome="allowed"}`: 3,
		`tollgate.fallback.decisions{outcome="denied"}`:  1,

		`tollgate.store.latency_count{}`:          18,
		`tollgate.delay_count{}`:                  1,
		`tollgate.delay_sum{}`:                    1,
		`tollgate.delay_bucket{le="0.5"}`:         0,
		`tollgate.delay_bucket{le="1"}`:           1,
		`tollgate.label.overflow{}`:               0,
		`tollgate.store.latency_bucket{le="0.1"}`: 18,
	})
	var total float64
	for k, v := range got {
		if strings.HasPrefix(k, "tollgate.decisions{") {
			total += v
		}
	}
	if total != 21 {
		t.Fatalf("%v decisions counted, want 21", total)
	}
}

func TestLatencyBoundaries(t *testing.T) {
	metrics, reader := newMetrics(t)
	metrics.Observe(context.Background(), tollgate.Observation{Outcome: tollgate.OutcomeAllowed, StoreLatency: 30 * time.Millisecond})
	got := points(t, reader)
	expect(t, got, map[string]float64{
		`tollgate.store.latency_bucket{le="2.5e-05"}`: 0, // timeout/2000
		`tollgate.store.latency_bucket{le="0.025"}`:   0, // half the default timeout
		`tollgate.store.latency_bucket{le="0.05"}`:    1, // the timeout
		`tollgate.store.latency_bucket{le="0.1"}`:     1,
		`tollgate.store.latency_count{}`:              1,
	})
}

func TestCardinalityLimit(t *testing.T) {
	metrics, reader := newMetrics(t, tollgateotel.WithCardinalityLimit(8))
	for i := range 100 {
		metrics.Observe(context.Background(), tollgate.Observation{Plan: "free", Policy: "free", Route: fmt.Sprint("/users/", i),
			Outcome: tollgate.OutcomeAllowed, Cost: 1})
	}
	got := points(t, reader)
	sets := map[string]bool{}
	for k := range got {
		if rest, ok := strings.CutPrefix(k, "tollgate.decisions{"); ok {
			sets[rest[strings.Index(rest, ",")+1:]] = true
		}
	}
	if len(sets) != 9 {
		t.Fatalf("%d attribute sets, want 8 and route other: %v", len(sets), sets)
	}
	expect(t, got, map[string]float64{
		`tollgate.decisions{outcome="allowed",plan="free",policy="free",route="other"}`: 92,
		`tollgate.label.overflow{}`: 92,
	})
}

// fakeRedis stands for a store with a circuit breaker and a denial cache.
type fakeRedis struct {
	flakyStore
	state   string
	opens   uint64
	answers uint64
}

func (s *fakeRedis) BreakerState() (string, uint64) { return s.state, s.opens }
func (s *fakeRedis) DenialCacheAnswers() uint64     { return s.answers }

var (
	_ tollgateotel.BreakerReporter     = (*fakeRedis)(nil)
	_ tollgateotel.DenialCacheReporter = (*fakeRedis)(nil)
	_ tollgateotel.StatsReporter       = (*memory.Store)(nil)
)

func TestStoreFigures(t *testing.T) {
	redis := &fakeRedis{flakyStore: *newModel(), state: "open", opens: 3, answers: 17}
	local := memory.New(memory.WithMaxKeys(4), memory.WithSweepInterval(0))
	t.Cleanup(func() { local.Close() })
	for i := range 10 {
		local.Take(context.Background(), fmt.Sprint("tenant-", i), tollgate.Limit{Rate: 1, Burst: 5}, 3) // well spent: evicting it drains
	}
	_, reader := newMetrics(t, tollgateotel.WithStore(redis), tollgateotel.WithFallbackStore(local))
	st := local.Stats()
	if st.Evictions == 0 || st.DrainedEvictions == 0 {
		t.Fatalf("the memory store evicted nothing: %+v", st)
	}
	expect(t, points(t, reader), map[string]float64{
		`tollgate.store.breaker.state{state="closed",store="main"}`:    0,
		`tollgate.store.breaker.state{state="open",store="main"}`:      1,
		`tollgate.store.breaker.state{state="half_open",store="main"}`: 0,
		`tollgate.store.breaker.opens{store="main"}`:                   3,
		`tollgate.store.denial_cache.answers{store="main"}`:            17,
		`tollgate.store.keys{store="fallback"}`:                        float64(st.Keys),
		`tollgate.store.evictions{store="fallback"}`:                   float64(st.Evictions),
		`tollgate.store.drained_evictions{store="fallback"}`:           float64(st.DrainedEvictions),
	})
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		opt  tollgateotel.Option
		want string
	}{
		{tollgateotel.WithCardinalityLimit(-1), "WithCardinalityLimit"},
		{tollgateotel.WithStoreTimeout(0), "WithStoreTimeout"},
		{tollgateotel.WithStore(nil), "WithStore"},
		{tollgateotel.WithFallbackStore(nil), "WithFallbackStore"},
		{tollgateotel.WithMeterProvider(nil), "WithMeterProvider"},
	} {
		if _, err := tollgateotel.New(tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%s): %v", tc.want, err)
		}
	}
}

// Decisions counted while the reader collects: run with -race.
func TestConcurrentDecisionsAndCollections(t *testing.T) {
	metrics, reader := newMetrics(t, tollgateotel.WithCardinalityLimit(8))
	l := newLimiter(t, newModel(), tollgate.WithObserver(metrics))
	const workers, each = 4, 500
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				l.Take(context.Background(), tollgate.Request{Tenant: fmt.Sprint("t", w), Route: fmt.Sprint("/r", i%12)})
			}
		})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 20 {
			points(t, reader)
		}
	}()
	wg.Wait()
	<-done
	got := points(t, reader)
	var total float64
	for k, v := range got {
		if strings.HasPrefix(k, "tollgate.decisions{") {
			total += v
		}
	}
	// A plan lookup that outlasts its timeout on a loaded machine fails the
	// decision open without calling the store.
	called := workers*each - got[`tollgate.resolver.errors{}`]
	if total != workers*each || got[`tollgate.store.latency_count{}`] != called {
		t.Fatalf("%v decisions, %v latencies; want %d and %v", total, got[`tollgate.store.latency_count{}`], workers*each, called)
	}
}

func TestCloseStopsReporting(t *testing.T) {
	metrics, reader := newMetrics(t)
	metrics.Observe(context.Background(), tollgate.Observation{Plan: "p", Outcome: tollgate.OutcomeAllowed, Cost: 1})
	if got := points(t, reader); got[`tollgate.decisions{outcome="allowed",plan="p",policy="",route=""}`] != 1 {
		t.Fatalf("before Close: %v", got)
	}
	if err := metrics.Close(); err != nil {
		t.Fatal(err)
	}
	for k := range points(t, reader) {
		if strings.HasPrefix(k, "tollgate.decisions{") {
			t.Fatalf("after Close: %s", k)
		}
	}
}

// allowAll is a MultiStore that allows everything at no cost.
type allowAll struct{}

func (allowAll) Take(context.Context, string, tollgate.Limit, int64) (tollgate.Result, error) {
	return tollgate.Result{Allowed: true}, nil
}

func (allowAll) Do(_ context.Context, op *tollgate.Op) error {
	op.Allowed = true
	op.Results = op.Results[:0]
	for range op.Rules {
		op.Results = append(op.Results, tollgate.Result{Allowed: true, Remaining: 1})
	}
	return nil
}

func TestObservingAllocatesNothing(t *testing.T) {
	metrics, _ := newMetrics(t, tollgateotel.WithCardinalityLimit(1))
	l, err := tollgate.New(allowAll{}, tollgate.SinglePlan(tollgate.Plan{Name: "big", Limit: tollgate.Limit{Rate: 1e6, Burst: 1e9}}),
		tollgate.WithLogger(nil), tollgate.WithObserver(metrics))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	known := tollgate.Request{Tenant: "t", Route: "/known"}
	folded := tollgate.Request{Tenant: "t", Route: "/folded"}
	var d tollgate.Decision
	l.Decide(ctx, &known, &d)
	l.Decide(ctx, &folded, &d)
	for _, req := range []*tollgate.Request{&known, &folded} {
		if n := testing.AllocsPerRun(1000, func() { l.Decide(ctx, req, &d) }); n != 0 {
			t.Errorf("a decision on route %s allocates %v times with the SDK's MeterProvider", req.Route, n)
		}
	}
}
