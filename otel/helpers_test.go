package tollgateotel_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/storetest"
	tollgateotel "github.com/tollgate-go/tollgate/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// newMetrics returns a Metrics on a MeterProvider of its own, and the
// reader that collects it.
func newMetrics(t *testing.T, opts ...tollgateotel.Option) (*tollgateotel.Metrics, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	m, err := tollgateotel.New(append([]tollgateotel.Option{tollgateotel.WithMeterProvider(mp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, reader
}

// points collects reader and flattens its points into
// name{key="value",...} -> value, attributes sorted; a histogram gives
// name_count, name_sum and name_bucket{le="bound"} (cumulative, as
// Prometheus counts them).
func points(t *testing.T, reader *sdkmetric.ManualReader) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	key := func(name string, set attribute.Set, extra ...string) string {
		var pairs []string
		for _, kv := range set.ToSlice() {
			pairs = append(pairs, fmt.Sprintf("%s=%q", kv.Key, kv.Value.String()))
		}
		pairs = append(pairs, extra...)
		sort.Strings(pairs)
		return name + "{" + strings.Join(pairs, ",") + "}"
	}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != tollgateotel.ScopeName {
			t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range data.DataPoints {
					out[key(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range data.DataPoints {
					out[key(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range data.DataPoints {
					out[key(m.Name+"_count", p.Attributes)] = float64(p.Count)
					out[key(m.Name+"_sum", p.Attributes)] = p.Sum
					var cum uint64
					for i, b := range p.Bounds {
						cum += p.BucketCounts[i]
						out[key(m.Name+"_bucket", p.Attributes, fmt.Sprintf("le=%q", fmt.Sprint(b)))] = float64(cum)
					}
				}
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out
}

// expect checks that got holds every point of want with its value.
func expect(t *testing.T, got map[string]float64, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("missing %s (want %v)", k, v)
		} else if g != v {
			t.Errorf("%s = %v, want %v", k, g, v)
		}
	}
}

// kindError is a store error that reports its kind, as the Redis store's do.
type kindError string

func (e kindError) Error() string     { return "store failed: " + string(e) }
func (e kindError) ErrorKind() string { return string(e) }

// flakyStore is the reference MultiStore that fails with err while one is
// set.
type flakyStore struct {
	*storetest.ModelStore
	err atomic.Pointer[error]
}

func (s *flakyStore) fail(err error) { s.err.Store(&err) }

func (s *flakyStore) Take(ctx context.Context, key string, limit tollgate.Limit, cost int64) (tollgate.Result, error) {
	if err := s.err.Load(); err != nil {
		return tollgate.Result{}, *err
	}
	return s.ModelStore.Take(ctx, key, limit, cost)
}

func (s *flakyStore) Do(ctx context.Context, op *tollgate.Op) error {
	if err := s.err.Load(); err != nil {
		return *err
	}
	return s.ModelStore.Do(ctx, op)
}

// newModel returns the reference store on a clock that never moves.
func newModel() *flakyStore {
	return &flakyStore{ModelStore: storetest.NewModelStore(storetest.NewClock().Now)}
}

// newLimiter returns a quiet Limiter over store: tenant "s" on the plan
// "shadowed" (burst 2), tenant "lost" a resolver failure, everyone else on
// "small" (burst 3), all at 1 token a second. Its resolver timeout is
// long, so that a stall of a loaded machine does not fail a decision open.
func newLimiter(t *testing.T, store tollgate.Store, opts ...tollgate.Option) *tollgate.Limiter {
	t.Helper()
	static, err := tollgate.NewStaticResolver([]tollgate.Plan{
		{Name: "small", Limit: tollgate.Limit{Rate: 1, Burst: 3}},
		{Name: "shadowed", Limit: tollgate.Limit{Rate: 1, Burst: 2}},
	}, "small", map[string]string{"s": "shadowed"})
	if err != nil {
		t.Fatal(err)
	}
	plans := tollgate.PlanResolverFunc(func(ctx context.Context, tenant string) (tollgate.Plan, error) {
		if tenant == "lost" {
			return tollgate.Plan{}, errors.New("plan database down")
		}
		return static.ResolvePlan(ctx, tenant)
	})
	l, err := tollgate.New(store, plans, append([]tollgate.Option{tollgate.WithLogger(nil), tollgate.WithResolverTimeout(time.Minute)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

const hello, reports = "GET /api/hello", "POST /api/reports"

// runMix makes the known mix of decisions of tollgateprom's test through
// two Limiters observed by obs: the second has a failing store and a
// fallback.
func runMix(t *testing.T, obs tollgate.Observer) {
	t.Helper()
	ctx := context.Background()
	store := newModel()
	l := newLimiter(t, store, tollgate.WithShadow("shadowed"), tollgate.WithObserver(obs))
	take := func(tenant, route string, cost int64, maxDelay time.Duration) tollgate.Decision {
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
