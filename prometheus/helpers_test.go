package tollgateprom_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/storetest"
)

// samples flattens metric families into name{label="value",...} -> value,
// labels sorted; a histogram gives its _count, _sum and _bucket samples.
func samples(t *testing.T, families []*dto.MetricFamily) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var pairs []string
			for _, l := range m.GetLabel() {
				pairs = append(pairs, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(pairs)
			key := func(name string, extra ...string) string {
				all := append(append([]string(nil), pairs...), extra...)
				sort.Strings(all)
				return name + "{" + strings.Join(all, ",") + "}"
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[key(f.GetName())] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key(f.GetName())] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				out[key(f.GetName()+"_count")] = float64(h.GetSampleCount())
				out[key(f.GetName()+"_sum")] = h.GetSampleSum()
				for _, b := range h.GetBucket() {
					le := fmt.Sprintf("le=%q", fmt.Sprint(b.GetUpperBound()))
					out[key(f.GetName()+"_bucket", le)] = float64(b.GetCumulativeCount())
				}
				out[key(f.GetName()+"_bucket", `le="+Inf"`)] = float64(h.GetSampleCount())
			default:
				t.Fatalf("unexpected metric type %v of %s", f.GetType(), f.GetName())
			}
		}
	}
	return out
}

// gather registers c alone in a fresh pedantic registry (which checks
// descriptions against metrics) and returns its samples.
func gather(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return samples(t, families)
}

// expect checks that got holds every sample of want with its value.
func expect(t *testing.T, got map[string]float64, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		g, ok := got[k]
		switch {
		case !ok:
			t.Errorf("missing %s (want %v)", k, v)
		case g != v && !(math.IsNaN(g) && math.IsNaN(v)):
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

func (s *flakyStore) fail(err error) {
	if err == nil {
		s.err.Store(nil)
		return
	}
	s.err.Store(&err)
}

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

var errResolver = errors.New("plan database down")

// testPlans gives tenant "s" the plan "shadowed" (burst 2), tenant "lost" a
// resolver failure, and everyone else "small" (burst 3), all at 1 token a
// second.
func testPlans(t *testing.T) tollgate.PlanResolver {
	t.Helper()
	static, err := tollgate.NewStaticResolver([]tollgate.Plan{
		{Name: "small", Limit: tollgate.Limit{Rate: 1, Burst: 3}},
		{Name: "shadowed", Limit: tollgate.Limit{Rate: 1, Burst: 2}},
	}, "small", map[string]string{"s": "shadowed"})
	if err != nil {
		t.Fatal(err)
	}
	return tollgate.PlanResolverFunc(func(ctx context.Context, tenant string) (tollgate.Plan, error) {
		if tenant == "lost" {
			return tollgate.Plan{}, errResolver
		}
		return static.ResolvePlan(ctx, tenant)
	})
}

// newLimiter returns a Limiter over store, quiet, observed by the options'
// observers. Its resolver timeout is long, so that a stall of a loaded
// machine does not fail a decision open.
func newLimiter(t *testing.T, store tollgate.Store, opts ...tollgate.Option) *tollgate.Limiter {
	t.Helper()
	l, err := tollgate.New(store, testPlans(t), append([]tollgate.Option{tollgate.WithLogger(nil), tollgate.WithResolverTimeout(time.Minute)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// newModel returns the reference store on a clock that never moves, so
// that decisions do not depend on how fast the test runs.
func newModel() *flakyStore {
	return &flakyStore{ModelStore: storetest.NewModelStore(storetest.NewClock().Now)}
}
