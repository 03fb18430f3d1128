package tollgateprom_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	tollgateprom "github.com/tollgate-go/tollgate/prometheus"
)

func observe(c *tollgateprom.Collector, plan, route string, outcome tollgate.Outcome) {
	c.Observe(context.Background(), tollgate.Observation{Plan: plan, Policy: plan, Route: route, Outcome: outcome, Cost: 1})
}

func TestCardinalityLimit(t *testing.T) {
	metrics, err := tollgateprom.New(tollgateprom.WithCardinalityLimit(8))
	if err != nil {
		t.Fatal(err)
	}
	// Raw paths as routes, the mistake the limit guards against.
	for i := range 100 {
		observe(metrics, "free", fmt.Sprintf("/users/%d", i), tollgate.OutcomeAllowed)
	}
	got := gather(t, metrics)
	if sets := labelSets(got); len(sets) != 8+1 {
		t.Fatalf("%d label sets, want the 8 first and route other: %v", len(sets), sets)
	}
	expect(t, got, map[string]float64{
		`tollgate_decisions_total{outcome="allowed",plan="free",policy="free",route="/users/0"}`: 1,
		`tollgate_decisions_total{outcome="allowed",plan="free",policy="free",route="/users/7"}`: 1,
		`tollgate_decisions_total{outcome="allowed",plan="free",policy="free",route="other"}`:    92,
		`tollgate_tokens_spent_total{plan="free",route="other"}`:                                 92,
		`tollgate_label_overflow_total{}`:                                                        92,
	})
	// Plans made per tenant: past the limit and a quarter (10 label
	// sets), every label is other.
	for i := range 100 {
		observe(metrics, fmt.Sprintf("custom-%d", i), "/x", tollgate.OutcomeDenied)
	}
	got = gather(t, metrics)
	if sets := labelSets(got); len(sets) != 8+1+1+1 {
		t.Fatalf("%d label sets, want 11: 8, free with route other, custom-0 with route other, and all other: %v", len(sets), sets)
	}
	expect(t, got, map[string]float64{
		`tollgate_decisions_total{outcome="denied",plan="custom-0",policy="custom-0",route="other"}`: 1,
		`tollgate_decisions_total{outcome="denied",plan="other",policy="other",route="other"}`:       99,
		`tollgate_label_overflow_total{}`: 192,
	})
}

// labelSets returns the label sets of tollgate_decisions_total, outcome
// aside.
func labelSets(got map[string]float64) map[string]bool {
	sets := map[string]bool{}
	for k := range got {
		if rest, ok := strings.CutPrefix(k, "tollgate_decisions_total{"); ok {
			sets[rest[strings.Index(rest, ",")+1:]] = true
		}
	}
	return sets
}

func TestHostileLabels(t *testing.T) {
	metrics, err := tollgateprom.New()
	if err != nil {
		t.Fatal(err)
	}
	long := "/" + strings.Repeat("a", 300)
	observe(metrics, "free", long+"1", tollgate.OutcomeAllowed)
	observe(metrics, "free", long+"2", tollgate.OutcomeAllowed) // the same label once cut
	observe(metrics, "free", "/\xff\xfe", tollgate.OutcomeAllowed)
	observe(metrics, "free\x00", "", tollgate.Outcome(200)) // an outcome from a newer core
	metrics.Observe(context.Background(), tollgate.Observation{Plan: "free", Outcome: tollgate.OutcomeFailedOpen, ErrorKind: "\xff"})
	got := gather(t, metrics) // a pedantic registry: fails on invalid or duplicate metrics
	cut := long[:256]
	expect(t, got, map[string]float64{
		`tollgate_decisions_total{outcome="allowed",plan="free",policy="free",route="` + cut + `"}`:     2,
		"tollgate_decisions_total{outcome=\"allowed\",plan=\"free\",policy=\"free\",route=\"/\uFFFD\"}": 1,
		`tollgate_decisions_total{outcome="unknown",plan="free\x00",policy="free\x00",route=""}`:        1,
		"tollgate_store_errors_total{kind=\"\uFFFD\"}":                                                  1,
	})
}

func TestStoreErrorKindsAreBounded(t *testing.T) {
	metrics, err := tollgateprom.New()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		metrics.Observe(context.Background(), tollgate.Observation{Plan: "free", Outcome: tollgate.OutcomeFailedOpen, ErrorKind: fmt.Sprint("kind-", i)})
	}
	got := gather(t, metrics)
	kinds := 0
	for k := range got {
		if strings.HasPrefix(k, "tollgate_store_errors_total{") {
			kinds++
		}
	}
	if kinds != 17 || got[`tollgate_store_errors_total{kind="other"}`] != 24 || got[`tollgate_store_errors_total{kind="kind-0"}`] != 1 {
		t.Fatalf("%d kinds; other %v", kinds, got[`tollgate_store_errors_total{kind="other"}`])
	}
}

// fakeRedis stands for a store with a circuit breaker and a denial cache:
// it has the methods the Collector asks for and nothing else.
type fakeRedis struct {
	flakyStore
	state   string
	opens   uint64
	answers uint64
}

func (s *fakeRedis) BreakerState() (string, uint64) { return s.state, s.opens }
func (s *fakeRedis) DenialCacheAnswers() uint64     { return s.answers }

var (
	_ tollgateprom.BreakerReporter     = (*fakeRedis)(nil)
	_ tollgateprom.DenialCacheReporter = (*fakeRedis)(nil)
	_ tollgateprom.StatsReporter       = (*memory.Store)(nil)
)

func TestStoreFigures(t *testing.T) {
	redis := &fakeRedis{flakyStore: *newModel(), state: "open", opens: 3, answers: 17}
	local := memory.New(memory.WithMaxKeys(4), memory.WithSweepInterval(0))
	t.Cleanup(func() { local.Close() })
	for i := range 10 {
		local.Take(context.Background(), fmt.Sprint("tenant-", i), tollgate.Limit{Rate: 1, Burst: 5}, 3) // well spent: evicting it drains
	}
	metrics, err := tollgateprom.New(tollgateprom.WithStore(redis), tollgateprom.WithFallbackStore(local))
	if err != nil {
		t.Fatal(err)
	}
	got := gather(t, metrics)
	st := local.Stats()
	if st.Evictions == 0 || st.DrainedEvictions == 0 {
		t.Fatalf("the memory store evicted nothing: %+v", st)
	}
	expect(t, got, map[string]float64{
		`tollgate_store_breaker_state{state="closed",store="main"}`:    0,
		`tollgate_store_breaker_state{state="open",store="main"}`:      1,
		`tollgate_store_breaker_state{state="half_open",store="main"}`: 0,
		`tollgate_store_breaker_opens_total{store="main"}`:             3,
		`tollgate_store_denial_cache_answers_total{store="main"}`:      17,
		`tollgate_store_keys{store="fallback"}`:                        float64(st.Keys),
		`tollgate_store_evictions_total{store="fallback"}`:             float64(st.Evictions),
		`tollgate_store_drained_evictions_total{store="fallback"}`:     float64(st.DrainedEvictions),
	})
	if _, ok := got[`tollgate_store_keys{store="main"}`]; ok {
		t.Error("keys reported for a store that does not count them")
	}
	redis.state = "half_open"
	if got := gather(t, metrics); got[`tollgate_store_breaker_state{state="half_open",store="main"}`] != 1 ||
		got[`tollgate_store_breaker_state{state="open",store="main"}`] != 0 {
		t.Errorf("after the breaker's probe: %v", got)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		opt  tollgateprom.Option
		want string
	}{
		{tollgateprom.WithCardinalityLimit(0), "WithCardinalityLimit"},
		{tollgateprom.WithStoreTimeout(-time.Second), "WithStoreTimeout"},
		{tollgateprom.WithStore(nil), "WithStore"},
		{tollgateprom.WithFallbackStore(nil), "WithFallbackStore"},
	} {
		if _, err := tollgateprom.New(tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%s): %v", tc.want, err)
		}
	}
	s := newModel()
	if _, err := tollgateprom.New(tollgateprom.WithStore(s), tollgateprom.WithStore(s)); err == nil {
		t.Error("New accepts two main stores")
	}
}

func TestLatencyBucketsFollowTheTimeout(t *testing.T) {
	metrics, err := tollgateprom.New(tollgateprom.WithStoreTimeout(200 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	metrics.Observe(context.Background(), tollgate.Observation{Outcome: tollgate.OutcomeAllowed, StoreLatency: 120 * time.Millisecond})
	got := gather(t, metrics)
	expect(t, got, map[string]float64{
		`tollgate_store_latency_seconds_bucket{le="0.0001"}`: 0, // timeout/2000
		`tollgate_store_latency_seconds_bucket{le="0.1"}`:    0, // half the timeout
		`tollgate_store_latency_seconds_bucket{le="0.2"}`:    1, // the timeout
		`tollgate_store_latency_seconds_bucket{le="0.4"}`:    1,
		`tollgate_store_latency_seconds_sum{}`:               0.12,
	})
}

// Decisions counted while other goroutines scrape: run with -race.
func TestConcurrentDecisionsAndScrapes(t *testing.T) {
	metrics, err := tollgateprom.New(tollgateprom.WithCardinalityLimit(8))
	if err != nil {
		t.Fatal(err)
	}
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
	stop := make(chan struct{})
	scraped := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				scraped <- n
				return
			default:
				gather(t, metrics)
				n++
			}
		}
	}()
	wg.Wait()
	close(stop)
	if n := <-scraped; n == 0 {
		t.Log("no scrape overlapped the decisions")
	}
	var total float64
	got := gather(t, metrics)
	for k, v := range got {
		if strings.HasPrefix(k, "tollgate_decisions_total{") {
			total += v
		}
	}
	// A plan lookup that outlasts its timeout on a loaded machine fails the
	// decision open without calling the store.
	called := workers*each - got[`tollgate_resolver_errors_total{}`]
	if total != workers*each || got[`tollgate_store_latency_seconds_count{}`] != called {
		t.Fatalf("%v decisions counted, %v latencies; want %d and %v", total, got[`tollgate_store_latency_seconds_count{}`], workers*each, called)
	}
	if sets := labelSets(got); len(sets) > 8+2+1 {
		t.Fatalf("%d label sets past a limit of 8", len(sets))
	}
}

// allowAll is a MultiStore that allows everything at no cost, so that the
// allocation test sees the Limiter's and the Collector's own.
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
	metrics, err := tollgateprom.New(tollgateprom.WithCardinalityLimit(1))
	if err != nil {
		t.Fatal(err)
	}
	l, err := tollgate.New(allowAll{}, tollgate.SinglePlan(tollgate.Plan{Name: "big", Limit: tollgate.Limit{Rate: 1e6, Burst: 1e9}}),
		tollgate.WithLogger(nil), tollgate.WithObserver(metrics))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	known := tollgate.Request{Tenant: "t", Route: "/known"}
	folded := tollgate.Request{Tenant: "t", Route: "/folded"} // past the limit of 1
	var d tollgate.Decision
	l.Decide(ctx, &known, &d)
	l.Decide(ctx, &folded, &d)
	for _, req := range []*tollgate.Request{&known, &folded} {
		if n := testing.AllocsPerRun(1000, func() { l.Decide(ctx, req, &d) }); n != 0 {
			t.Errorf("a decision on route %s allocates %v times with the Collector", req.Route, n)
		}
	}
}
