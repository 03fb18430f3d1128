package metrickit_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/metrickit"
	"github.com/tollgate-go/tollgate/core/metrickit/metrictest"
	"github.com/tollgate-go/tollgate/core/storekit"
)

// observer makes a Tally an Observer, as each exporter does.
type observer struct{ *metrickit.Tally }

func (o observer) Observe(_ context.Context, d *tollgate.Decision) { o.Tally.Observe(d) }

func (o observer) ReportSlots(l *tollgate.Limiter) { o.AddLimiter(l) }

func newTally(t *testing.T, histograms bool, opts ...func(*metrickit.Options)) *metrickit.Tally {
	t.Helper()
	o := metrickit.NewOptions("test")
	for _, f := range opts {
		f(&o)
	}
	tl, err := metrickit.New(o, histograms)
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

func limit(n int) func(*metrickit.Options) { return func(o *metrickit.Options) { o.Limit = n } }

// collect flattens what tl exports into samples named as OpenTelemetry
// names them.
func collect(tl *metrickit.Tally) map[string]float64 {
	out := map[string]float64{}
	tl.Collect(func(m *metrickit.Metric, v uint64, labels ...string) {
		out[metrictest.Key(m.Name, m.Labels, labels)] = float64(v)
	})
	for m, s := range map[*metrickit.Metric]metrickit.Snapshot{metrickit.StoreLatency: tl.Latency(), metrickit.Delay: tl.Delay()} {
		out[m.Name+"_count{}"] = float64(s.Count)
		out[m.Name+"_sum{}"] = s.Sum
		for i, b := range s.Bounds {
			out[metrictest.Key(m.Name+"_bucket", nil, nil, fmt.Sprintf("le=%q", fmt.Sprint(b)))] = float64(s.Cumulative[i])
		}
	}
	return out
}

func name(m *metrickit.Metric) string { return m.Name }

func TestKnownMix(t *testing.T) {
	tl := newTally(t, true)
	metrictest.RunMix(t, observer{tl})
	got := collect(tl)
	metrictest.Expect(t, got, name, metrictest.Mix)
	if n := metrictest.Sum(got, metrickit.Decisions.Name); n != metrictest.MixDecisions {
		t.Fatalf("%v decisions counted, want %d", n, metrictest.MixDecisions)
	}
}

func TestLatencyBounds(t *testing.T) {
	us := time.Microsecond
	ms := time.Millisecond
	want := []time.Duration{25 * us, 50 * us, 100 * us, 250 * us, 500 * us, ms, 2500 * us, 5 * ms, 10 * ms, 25 * ms, 50 * ms, 100 * ms}
	if got := metrickit.LatencyBounds(50 * ms); !slices.Equal(got, want) {
		t.Errorf("LatencyBounds(50ms) = %v, want %v", got, want)
	}
	// A tiny timeout: bounds stay increasing.
	got := metrickit.LatencyBounds(3 * time.Nanosecond)
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("LatencyBounds(3ns) = %v, not increasing", got)
		}
	}
}

// Store latencies are counted in the series, beside the decisions, and
// their buckets follow the store timeout.
func TestLatency(t *testing.T) {
	tl := newTally(t, true, func(o *metrickit.Options) { o.StoreTimeout = 200 * time.Millisecond })
	for _, e := range []metrickit.Event{
		{Labels: metrickit.Labels{Plan: "a"}, Outcome: "allowed", Latency: 20 * time.Microsecond},
		{Labels: metrickit.Labels{Plan: "a"}, Outcome: "denied", Latency: 120 * time.Millisecond},
		{Labels: metrickit.Labels{Plan: "b"}, Outcome: "failed_open", Latency: time.Second, Failure: "timeout"},
		{Labels: metrickit.Labels{Plan: "b"}, Outcome: "failed_open", Failure: "resolver"}, // no store call
		{Labels: metrickit.Labels{Plan: "b"}, Outcome: "rejected", Failure: "invalid"},     // no store call
		{Labels: metrickit.Labels{Plan: "b"}, Outcome: "allowed"},                          // an in-process store
	} {
		tl.Count(e)
	}
	s := tl.Latency()
	if len(s.Bounds) != 12 || s.Bounds[0] != 1e-4 || s.Bounds[9] != 0.1 || s.Bounds[10] != 0.2 || s.Bounds[11] != 0.4 {
		t.Fatalf("bounds %v", s.Bounds)
	}
	if c := s.Cumulative; c[0] != 2 || c[9] != 2 || c[10] != 3 || c[11] != 3 || s.Count != 4 || math.Abs(s.Sum-1.12002) > 1e-9 {
		t.Errorf("latency %+v", s)
	}
	got := collect(tl)
	if n := metrictest.Sum(got, metrickit.Decisions.Name); n != 6 {
		t.Errorf("%v decisions, want 6", n)
	}
	if got[`tollgate.resolver.errors{}`] != 1 || got[`tollgate.store.errors{kind="timeout"}`] != 1 || got[`tollgate.store.errors{kind="invalid"}`] != 0 {
		t.Errorf("errors: %v", got)
	}
}

func TestCardinalityLimit(t *testing.T) {
	tl := newTally(t, false, limit(8))
	// Raw paths as routes, the mistake the limit guards against.
	for i := range 100 {
		tl.Count(metrickit.Event{Labels: metrickit.Labels{Plan: "free", Policy: "free", Route: fmt.Sprint("/users/", i)}, Outcome: "allowed", Cost: 1})
	}
	got := collect(tl)
	if sets := labelSets(got); len(sets) != 8+1 {
		t.Fatalf("%d label sets, want the 8 first and route other: %v", len(sets), sets)
	}
	want := func(plan, route, outcome string, n float64) metrictest.Sample {
		return metrictest.Sample{Metric: metrickit.Decisions, Labels: []string{plan, plan, route, outcome}, Value: n}
	}
	metrictest.Expect(t, got, name, []metrictest.Sample{
		want("free", "/users/0", "allowed", 1),
		want("free", "/users/7", "allowed", 1),
		want("free", "other", "allowed", 92),
		{Metric: metrickit.Tokens, Labels: []string{"free", "other"}, Value: 92},
		{Metric: metrickit.LabelOverflow, Value: 92},
	})
	// Plans made per tenant: past the limit and a quarter (10 label
	// sets), every label is other.
	for i := range 100 {
		plan := fmt.Sprint("custom-", i)
		tl.Count(metrickit.Event{Labels: metrickit.Labels{Plan: plan, Policy: plan, Route: "/x"}, Outcome: "denied", Cost: 1})
	}
	got = collect(tl)
	if sets := labelSets(got); len(sets) != 8+1+1+1 {
		t.Fatalf("%d label sets, want 11: 8, free with route other, custom-0 with route other, and all other: %v", len(sets), sets)
	}
	metrictest.Expect(t, got, name, []metrictest.Sample{
		want("custom-0", "other", "denied", 1),
		want("other", "other", "denied", 99),
		{Metric: metrickit.LabelOverflow, Value: 192},
	})
}

// labelSets returns the label sets of tollgate.decisions, outcome aside.
func labelSets(got map[string]float64) map[string]bool {
	sets := map[string]bool{}
	for k := range got {
		if rest, ok := strings.CutPrefix(k, metrickit.Decisions.Name+"{"); ok {
			sets[rest[strings.Index(rest, ",")+1:]] = true
		}
	}
	return sets
}

func TestHostileLabels(t *testing.T) {
	tl := newTally(t, false)
	long := "/" + strings.Repeat("a", 300)
	for _, e := range []metrickit.Event{
		{Labels: metrickit.Labels{Plan: "free", Policy: "free", Route: long + "1"}, Outcome: "allowed"},
		{Labels: metrickit.Labels{Plan: "free", Policy: "free", Route: long + "2"}, Outcome: "allowed"}, // the same label once cut
		{Labels: metrickit.Labels{Plan: "free", Policy: "free", Route: "/\xff\xfe"}, Outcome: "allowed"},
		{Labels: metrickit.Labels{Plan: "free", Policy: "free", Route: "/\xfe"}, Outcome: "allowed"}, // the same once made valid
		{Labels: metrickit.Labels{Plan: "free\x00"}, Outcome: "dithered"},                            // an outcome from a newer core
		{Labels: metrickit.Labels{Plan: "free"}, Outcome: "failed_open", Failure: "\xff"},
	} {
		tl.Count(e)
	}
	got := collect(tl)
	decisions := func(plan, policy, route, outcome string, n float64) metrictest.Sample {
		return metrictest.Sample{Metric: metrickit.Decisions, Labels: []string{plan, policy, route, outcome}, Value: n}
	}
	metrictest.Expect(t, got, name, []metrictest.Sample{
		decisions("free", "free", long[:metrickit.MaxLabelLength], "allowed", 2),
		decisions("free", "free", "/\uFFFD", "allowed", 2),
		decisions("free\x00", "", "", "unknown", 1),
		{Metric: metrickit.StoreErrors, Labels: []string{"\uFFFD"}, Value: 1},
	})
	if _, ok := got[metrictest.Key(metrickit.Decisions.Name, metrickit.Decisions.Labels, []string{"free", "free", "/\uFFFD", "unknown"})]; ok {
		t.Error("an unknown outcome is exported for a series that has none")
	}
}

func TestLabelValuesAreCutAtARune(t *testing.T) {
	tl := newTally(t, false)
	for _, route := range []string{strings.Repeat("é", 200), "a" + strings.Repeat("é", 200)} {
		tl.Count(metrickit.Event{Labels: metrickit.Labels{Route: route}, Outcome: "allowed"})
	}
	got := collect(tl)
	for _, route := range []string{strings.Repeat("é", 128), "a" + strings.Repeat("é", 127)} {
		if got[metrictest.Key(metrickit.Decisions.Name, metrickit.Decisions.Labels, []string{"", "", route, "allowed"})] != 1 {
			t.Errorf("no series for the route cut to %d bytes", len(route))
		}
	}
}

func TestStoreErrorKindsAreBounded(t *testing.T) {
	tl := newTally(t, false)
	for i := range 40 {
		tl.Count(metrickit.Event{Labels: metrickit.Labels{Plan: "free"}, Outcome: "failed_open", Failure: fmt.Sprint("kind-", i)})
	}
	got := collect(tl)
	kinds := 0
	for k := range got {
		if strings.HasPrefix(k, metrickit.StoreErrors.Name+"{") {
			kinds++
		}
	}
	if kinds != 17 || got[`tollgate.store.errors{kind="other"}`] != 24 || got[`tollgate.store.errors{kind="kind-0"}`] != 1 {
		t.Fatalf("%d kinds; other %v", kinds, got[`tollgate.store.errors{kind="other"}`])
	}
}

// Costs near the largest burst a plan may have do not wrap the token
// counts around, nor do delays of years the delay sum.
func TestCountsSaturate(t *testing.T) {
	tl := newTally(t, true)
	for range 20_000 {
		tl.Count(metrickit.Event{Labels: metrickit.Labels{Plan: "big"}, Outcome: "allowed", Cost: 999_999_999_999_999})
	}
	for range 8 {
		tl.Count(metrickit.Event{Labels: metrickit.Labels{Plan: "big"}, Outcome: "delayed", Cost: 1, Delay: 100 * 365 * 24 * time.Hour})
	}
	got := collect(tl)
	if n := got[`tollgate.tokens.spent{plan="big",route=""}`]; n != math.MaxUint64 {
		t.Errorf("tokens %v, want the largest count", n)
	}
	if s := tl.Delay(); s.Count != 8 || s.Sum != float64(math.MaxUint64)/1e9 {
		t.Errorf("delays %+v", s)
	}
}

// Goroutines that meet new label sets at once each get the one series.
func TestConcurrentInserts(t *testing.T) {
	tl := newTally(t, false)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range 500 {
				tl.Count(metrickit.Event{Labels: metrickit.Labels{Plan: "p", Route: fmt.Sprint("/", i%300)}, Outcome: "allowed", Cost: 2})
			}
		})
	}
	wg.Wait()
	got := collect(tl)
	sets, total, tokens := len(labelSets(got)), metrictest.Sum(got, metrickit.Decisions.Name), metrictest.Sum(got, metrickit.Tokens.Name)
	if sets != 300 || total != 2000 || tokens != 4000 {
		t.Fatalf("%d sets, %v decisions, %v tokens", sets, total, tokens)
	}
}

func TestStoreStatistics(t *testing.T) {
	main, fallback, want := metrictest.StatsStores()
	tl := newTally(t, false, func(o *metrickit.Options) {
		o.AddStore("WithStore", "main", main)
		o.AddStore("WithFallbackStore", "fallback", fallback)
		o.AddStore("WithOther", "quiet", metrictest.Quiet{Store: main}) // keeps no statistics: adds nothing
	})
	got := collect(tl)
	metrictest.Expect(t, got, name, want)
	stores := 0
	for k := range got {
		if strings.Contains(k, `store="`) {
			stores++
		}
	}
	if stores != 2*6 {
		t.Errorf("%d samples of stores, want 6 for each of main and fallback: %v", stores, got)
	}
	main.SetStats(storekit.Stats{BreakerOpens: 3}) // closed again
	if got := collect(tl); got[`tollgate.store.breaker.state{state="closed",store="main"}`] != 1 ||
		got[`tollgate.store.breaker.state{state="open",store="main"}`] != 0 {
		t.Errorf("after the breaker closed: %v", got)
	}
}

func TestOptionMistakes(t *testing.T) {
	o := metrickit.NewOptions("pkg")
	o.Limit = 0
	o.StoreTimeout = -time.Second
	o.AddStore("WithStore", "main", nil)
	s := metrictest.NewStore()
	o.AddStore("WithFallbackStore", "fallback", s)
	o.AddStore("WithFallbackStore", "fallback", s)
	_, err := metrickit.New(o, false)
	for _, want := range []string{"pkg: WithCardinalityLimit", "pkg: WithStoreTimeout", "pkg: WithStore: the store is nil", "pkg: WithFallbackStore: the fallback store is given twice"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v lacks %q", err, want)
		}
	}
}

func TestConcurrentDecisionsAndCollections(t *testing.T) {
	tl := newTally(t, true, limit(8))
	made, unresolved := metrictest.Concurrently(t, observer{tl}, func() { collect(tl) })
	got := collect(tl)
	if n := metrictest.Sum(got, metrickit.Decisions.Name); n != float64(made) || got["tollgate.store.latency_count{}"] != float64(made-unresolved) {
		t.Fatalf("%v decisions, %v latencies; want %d and %d", n, got["tollgate.store.latency_count{}"], made, made-unresolved)
	}
	if sets := labelSets(got); len(sets) > 8+2+1 {
		t.Fatalf("%d label sets past a limit of 8", len(sets))
	}
}

// TestRefusalsAndSlots: denials are counted by plan and the kind of the
// policy that denied them, whatever the route; the slots held are read
// from the Limiters when collected, and a plan whose slots came back shows
// 0 rather than vanishing.
func TestRefusalsAndSlots(t *testing.T) {
	tl := newTally(t, false)
	for _, e := range []metrickit.Event{
		{Labels: metrickit.Labels{Plan: "free", Policy: "free-inflight", Route: "/a"}, Outcome: "denied", Kind: "in-flight"},
		{Labels: metrickit.Labels{Plan: "free", Policy: "free-inflight", Route: "/b"}, Outcome: "denied", Kind: "in-flight"},
		{Labels: metrickit.Labels{Plan: "free", Policy: "free-inflight", Route: "/b"}, Outcome: "allowed", Kind: "in-flight"},
		{Labels: metrickit.Labels{Plan: "free", Policy: "free", Route: "/b"}, Outcome: "denied", Kind: "bucket"},
		{Labels: metrickit.Labels{Plan: "free", Policy: "free-daily", Route: "/b"}, Outcome: "shadow_denied", Kind: "quota"},
		{Labels: metrickit.Labels{Plan: "pro", Policy: "pro", Route: "/b"}, Outcome: "denied", Kind: "a kind of a newer core"},
	} {
		tl.Count(e)
	}
	l := metrictest.NewLimiter(t, metrictest.NewStore())
	tl.AddLimiter(l)
	tl.AddLimiter(l) // once is enough
	ctx := context.Background()
	d, err := l.Take(ctx, tollgate.Request{Tenant: "f"})
	if err != nil || !d.Allowed {
		t.Fatalf("%+v, %v", d, err)
	}
	refusals := func(plan, kind string) string {
		return metrictest.Key(metrickit.Refusals.Name, metrickit.Refusals.Labels, []string{plan, kind})
	}
	slots := metrictest.Key(metrickit.InFlightSlots.Name, metrickit.InFlightSlots.Labels, []string{"flight"})
	want := map[string]float64{
		refusals("free", "in-flight"): 2,
		refusals("free", "bucket"):    1,
		refusals("pro", "unknown"):    1,
		slots:                         1,
	}
	got := collect(tl)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if n := metrictest.Sum(got, metrickit.Refusals.Name); n != 4 {
		t.Errorf("%v refusals, want 4: shadow denials and allowed requests are none", n)
	}
	if err := l.Release(ctx, &d); err != nil {
		t.Fatal(err)
	}
	if v, ok := collect(tl)[slots]; !ok || v != 0 {
		t.Errorf("after the release %s = %v (reported: %v), want 0", slots, v, ok)
	}
}
