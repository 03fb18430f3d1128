// Package metrictest holds what the tests of both metrics exporters share:
// stores that fail or report statistics on demand, a known mix of
// decisions and the figures it must produce, and the checks that counting
// allocates nothing and races with nothing. Each exporter's tests flatten
// its output into samples named "name{label="value",...}" and compare.
package metrictest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/metrickit"
	"github.com/tollgate-go/tollgate/core/storekit"
	"github.com/tollgate-go/tollgate/core/storetest"
)

// KindError is a store error that reports its kind, as the Redis store's
// errors do.
type KindError string

func (e KindError) Error() string { return "store failed: " + string(e) }

// ErrorKind returns the kind, which metrics count the failure under.
func (e KindError) ErrorKind() string { return string(e) }

// A Store is the reference store on a clock that never moves, so that
// decisions do not depend on how fast a test runs. It fails with the error
// Fail sets, reports the statistics SetStats sets (zeros until then), and
// the I/O wait SetLatency sets (none until then).
type Store struct {
	model   *storetest.ModelStore
	err     atomic.Pointer[error]
	stats   atomic.Pointer[storekit.Stats]
	latency atomic.Int64
}

var (
	_ tollgate.Store    = (*Store)(nil)
	_ storekit.Reporter = (*Store)(nil)
)

// NewStore returns a Store that allows and denies as the reference model.
func NewStore() *Store {
	return &Store{model: storetest.NewModelStore(storetest.NewClock().Now)}
}

// Fail makes every operation fail with err from now on; nil mends it.
func (s *Store) Fail(err error) {
	if err == nil {
		s.err.Store(nil)
		return
	}
	s.err.Store(&err)
}

// SetStats sets the statistics the store reports.
func (s *Store) SetStats(st storekit.Stats) { s.stats.Store(&st) }

// Stats returns what SetStats set.
func (s *Store) Stats() storekit.Stats {
	if st := s.stats.Load(); st != nil {
		return *st
	}
	return storekit.Stats{}
}

// SetLatency makes the store report that each operation waited d on I/O,
// as a store behind a network does.
func (s *Store) SetLatency(d time.Duration) { s.latency.Store(int64(d)) }

// Do applies op as the reference model, or fails.
func (s *Store) Do(ctx context.Context, op *storekit.Op) error {
	op.Latency = time.Duration(s.latency.Load())
	if err := s.err.Load(); err != nil {
		return *err
	}
	return s.model.Do(ctx, op)
}

// A Quiet store is a store without statistics.
type Quiet struct{ tollgate.Store }

var errResolver = errors.New("plan database down")

// NewLimiter returns a Limiter over store, without a log: tenant "s" on the
// plan "shadowed" (burst 2), tenant "f" on "flight" (burst 3, and one
// request in flight at most), tenant "lost" a resolver failure, everyone
// else on "small" (burst 3), all at 1 token a second. Its resolver timeout
// is long, so that a stall of a loaded machine does not fail a decision
// open.
func NewLimiter(t testing.TB, store tollgate.Store, opts ...tollgate.Option) *tollgate.Limiter {
	t.Helper()
	static, err := tollgate.NewStaticResolver([]tollgate.Plan{
		{Name: "small", Limit: tollgate.Limit{Rate: 1, Burst: 3}},
		{Name: "shadowed", Limit: tollgate.Limit{Rate: 1, Burst: 2}},
		{Name: "flight", Limit: tollgate.Limit{Rate: 1, Burst: 3}, Policies: []tollgate.Policy{{InFlight: 1}}},
	}, "small", map[string]string{"s": "shadowed", "f": "flight"})
	if err != nil {
		t.Fatal(err)
	}
	plans := tollgate.PlanResolverFunc(func(ctx context.Context, tenant string) (tollgate.Plan, error) {
		if tenant == "lost" {
			return tollgate.Plan{}, errResolver
		}
		return static.ResolvePlan(ctx, tenant)
	})
	opts = append([]tollgate.Option{tollgate.WithLogger(nil), tollgate.WithResolverTimeout(time.Minute)}, opts...)
	l, err := tollgate.New(store, plans, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// The routes of the mix.
const (
	Hello   = "GET /api/hello"
	Reports = "POST /api/reports"
)

// MixDecisions is the number of decisions RunMix makes.
const MixDecisions = 23

// A SlotsReporter reports the slots that a Limiter's requests hold, as
// both exporters do (ReportSlots).
type SlotsReporter interface {
	ReportSlots(l *tollgate.Limiter)
}

// RunMix makes a known mix of decisions through two Limiters observed by
// obs, the second with a failing store and a fallback; Mix lists what they
// add up to. One request of the first holds its slot of an in-flight
// policy until the test ends; if obs is a SlotsReporter, it reports the
// first Limiter's slots.
func RunMix(t testing.TB, obs tollgate.Observer) {
	t.Helper()
	ctx := context.Background()
	store := NewStore()
	l := NewLimiter(t, store, tollgate.WithShadow("shadowed"), tollgate.WithObserver(obs))
	if r, ok := obs.(SlotsReporter); ok {
		r.ReportSlots(l)
	}
	take := func(tenant, route string, cost int64, maxDelay time.Duration) tollgate.Decision {
		t.Helper()
		d, _ := l.Take(ctx, tollgate.Request{Tenant: tenant, Method: "GET", Route: route, Cost: cost, MaxDelay: maxDelay})
		return d
	}
	for range 5 { // burst 3: 3 allowed, 2 denied
		take("a", Hello, 1, 0)
	}
	if d := take("a", Hello, 1, 10*time.Second); d.Outcome() != "delayed" || d.Delay != time.Second {
		t.Fatalf("want a decision delayed by 1s, got %s by %v", d.Outcome(), d.Delay)
	}
	for range 4 { // shadowed, burst 2: 2 allowed, 2 shadow-denied
		take("s", Reports, 1, 0)
	}
	held := take("f", Hello, 1, 0) // allowed, holding the plan's one slot
	t.Cleanup(func() { _ = l.Release(ctx, &held) })
	take("f", Hello, 1, 0)   // denied: no slot
	take("b", Reports, 2, 0) // allowed, 2 tokens
	take("a", Hello, 10, 0)  // rejected: above the burst
	take("", Hello, 1, 0)    // rejected: no tenant
	take("lost", Hello, 1, 0)
	store.Fail(KindError("circuit_open"))
	take("b", Hello, 1, 0)
	take("b", Hello, 1, 0)
	store.Fail(context.DeadlineExceeded)
	take("b", Hello, 1, 0)

	broken := NewStore()
	broken.Fail(KindError("circuit_open"))
	lf := NewLimiter(t, broken, tollgate.WithFallback(NewStore(), 1), tollgate.WithObserver(obs))
	for range 4 { // the fallback's burst 3: 3 allowed, 1 denied
		_, _ = lf.Take(ctx, tollgate.Request{Tenant: "c", Route: Hello})
	}
}

// A Sample is one value an exporter must export: Metric's series with
// Labels (values in the Metric's order), or for a histogram its _count,
// _sum or _bucket series (Suffix; Le for a bucket).
type Sample struct {
	Metric *metrickit.Metric
	Suffix string
	Le     string
	Labels []string
	Value  float64
}

func decisions(plan, policy, route, outcome string, n float64) Sample {
	return Sample{Metric: metrickit.Decisions, Labels: []string{plan, policy, route, outcome}, Value: n}
}

// Mix is what RunMix adds up to.
var Mix = []Sample{
	decisions("small", "small", Hello, "allowed", 3+3), // a, then c through the fallback
	decisions("small", "small", Hello, "denied", 2+1),
	decisions("small", "small", Hello, "delayed", 1),
	decisions("shadowed", "shadowed", Reports, "allowed", 2),
	decisions("shadowed", "shadowed", Reports, "shadow_denied", 2),
	decisions("shadowed", "shadowed", Reports, "denied", 0),
	decisions("small", "small", Reports, "allowed", 1),
	decisions("small", "", Hello, "rejected", 1),
	decisions("", "", Hello, "rejected", 1),
	decisions("", "", Hello, "failed_open", 1),
	decisions("small", "", Hello, "failed_open", 3),
	decisions("small", "", Hello, "failed_closed", 0),
	// The in-flight policy, with no slot left, is closest to denying.
	decisions("flight", "flight-inflight", Hello, "allowed", 1),
	decisions("flight", "flight-inflight", Hello, "denied", 1),

	{Metric: metrickit.Tokens, Labels: []string{"small", Hello}, Value: 3 + 1 + 3},
	{Metric: metrickit.Tokens, Labels: []string{"small", Reports}, Value: 2},
	{Metric: metrickit.Tokens, Labels: []string{"shadowed", Reports}, Value: 2},
	{Metric: metrickit.Tokens, Labels: []string{"flight", Hello}, Value: 1},

	{Metric: metrickit.Refusals, Labels: []string{"small", "bucket"}, Value: 2 + 1},
	{Metric: metrickit.Refusals, Labels: []string{"flight", "in-flight"}, Value: 1},
	{Metric: metrickit.InFlightSlots, Labels: []string{"flight"}, Value: 1},

	{Metric: metrickit.StoreErrors, Labels: []string{"circuit_open"}, Value: 2 + 4},
	{Metric: metrickit.StoreErrors, Labels: []string{"timeout"}, Value: 1},
	{Metric: metrickit.ResolverErrors, Value: 1},

	{Metric: metrickit.FallbackDecisions, Labels: []string{"allowed"}, Value: 3},
	{Metric: metrickit.FallbackDecisions, Labels: []string{"denied"}, Value: 1},
	{Metric: metrickit.FallbackDecisions, Labels: []string{"delayed"}, Value: 0},
	{Metric: metrickit.FallbackDecisions, Labels: []string{"shadow_denied"}, Value: 0},

	// Every decision but the two rejected and the resolver's failure
	// called a store, in the process: latency 0.
	{Metric: metrickit.StoreLatency, Suffix: "_count", Value: 20},
	{Metric: metrickit.StoreLatency, Suffix: "_bucket", Le: "2.5e-05", Value: 20},
	{Metric: metrickit.Delay, Suffix: "_count", Value: 1},
	{Metric: metrickit.Delay, Suffix: "_sum", Value: 1},
	{Metric: metrickit.Delay, Suffix: "_bucket", Le: "0.5", Value: 0},
	{Metric: metrickit.Delay, Suffix: "_bucket", Le: "1", Value: 1},
	{Metric: metrickit.LabelOverflow, Value: 0},
}

// StatsStores returns a main store whose breaker is open and a fallback
// store that holds and evicted tenants, and what an exporter given both
// (as "main" and "fallback") must report of them.
func StatsStores() (main, fallback *Store, want []Sample) {
	main, fallback = NewStore(), NewStore()
	main.SetStats(storekit.Stats{BreakerOpen: true, BreakerOpens: 3})
	fallback.SetStats(storekit.Stats{Tenants: 4, Evictions: 6, DrainedEvictions: 2})
	return main, fallback, []Sample{
		{Metric: metrickit.BreakerState, Labels: []string{"main", "closed"}, Value: 0},
		{Metric: metrickit.BreakerState, Labels: []string{"main", "open"}, Value: 1},
		{Metric: metrickit.BreakerOpens, Labels: []string{"main"}, Value: 3},
		{Metric: metrickit.StoreTenants, Labels: []string{"main"}, Value: 0},
		{Metric: metrickit.StoreTenants, Labels: []string{"fallback"}, Value: 4},
		{Metric: metrickit.StoreEvictions, Labels: []string{"fallback"}, Value: 6},
		{Metric: metrickit.StoreDrainedEvictions, Labels: []string{"fallback"}, Value: 2},
		{Metric: metrickit.BreakerState, Labels: []string{"fallback", "closed"}, Value: 1},
	}
}

// Key returns the name of a flattened sample: name, then the labels and
// their values sorted by label, such as `tollgate_tokens_spent_total{plan="free",route="/"}`.
// extra are more pairs, already written (`le="0.5"`).
func Key(name string, labels, values []string, extra ...string) string {
	pairs := slices.Clone(extra)
	for i, l := range labels {
		pairs = append(pairs, fmt.Sprintf("%s=%q", l, values[i]))
	}
	sort.Strings(pairs)
	return name + "{" + strings.Join(pairs, ",") + "}"
}

// Expect fails t unless got holds every sample of want, each named by
// name (the exporter's name of its Metric), with its value.
func Expect(t testing.TB, got map[string]float64, name func(*metrickit.Metric) string, want []Sample) {
	t.Helper()
	for _, s := range want {
		var extra []string
		if s.Le != "" {
			extra = append(extra, fmt.Sprintf("le=%q", s.Le))
		}
		k := Key(name(s.Metric)+s.Suffix, s.Metric.Labels, s.Labels, extra...)
		if g, ok := got[k]; !ok {
			t.Errorf("missing %s (want %v)", k, s.Value)
		} else if g != s.Value {
			t.Errorf("%s = %v, want %v", k, g, s.Value)
		}
	}
}

// Sum adds up the samples of got whose names start with name and "{".
func Sum(got map[string]float64, name string) float64 {
	var n float64
	for k, v := range got {
		if strings.HasPrefix(k, name+"{") {
			n += v
		}
	}
	return n
}

// Concurrently makes decisions on four goroutines through a Limiter
// observed by obs while collect runs again and again, for the race
// detector, and returns how many decisions it made and how many of them
// found no plan in time (a loaded machine may stall a lookup past its
// timeout), which call no store.
func Concurrently(t testing.TB, obs tollgate.Observer, collect func()) (made, unresolved int) {
	t.Helper()
	var resolverErrors atomic.Int64
	l := NewLimiter(t, NewStore(), tollgate.WithObserver(obs))
	const workers, each = 4, 500
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				d, _ := l.Take(context.Background(), tollgate.Request{Tenant: fmt.Sprint("t", w), Route: fmt.Sprint("/r", i%12)})
				if d.FailureKind() == "resolver" {
					resolverErrors.Add(1)
				}
			}
		})
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				collect()
			}
		}
	}()
	wg.Wait()
	close(stop)
	<-done
	return workers * each, int(resolverErrors.Load())
}

// allowAll allows everything at no cost, so that an allocation test sees
// the Limiter's and its observers' own.
type allowAll struct{}

func (allowAll) Do(_ context.Context, op *storekit.Op) error {
	op.Allowed = true
	op.Results = op.Results[:0]
	for range op.Rules {
		op.Results = append(op.Results, storekit.Result{Allowed: true, Remaining: 1})
	}
	return nil
}

// CheckAllocs fails t if obs allocates to count a decision of a label set
// it has seen, or of one past its cardinality limit, which must be 1. The
// race detector allocates on its own: call it in builds without.
func CheckAllocs(t testing.TB, obs tollgate.Observer) {
	t.Helper()
	l, err := tollgate.New(allowAll{}, tollgate.SinglePlan(tollgate.Plan{Name: "big", Limit: tollgate.Limit{Rate: 1e6, Burst: 1e9}}),
		tollgate.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, route := range []string{"/known", "/folded"} { // the second past the limit of 1
		d, err := l.Take(ctx, tollgate.Request{Tenant: "t", Route: route, Cost: 2})
		if err != nil || !d.Allowed {
			t.Fatalf("%s: %v", route, err)
		}
		obs.Observe(ctx, &d)
		if n := testing.AllocsPerRun(1000, func() { obs.Observe(ctx, &d) }); n != 0 {
			t.Errorf("counting a decision on route %s allocates %v times", route, n)
		}
	}
}
