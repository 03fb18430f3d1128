package bench

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/insights"
)

// How the insights benchmarks are read (docs/observability.md has the
// command and the numbers):
//
//   - lib=insights is the upgrade-candidates Tracker (k = 1,000); lib=map is
//     what an application writes without it: a throttle counter per tenant
//     in a map under a mutex, fed by the same Observer calls, which
//     keeps every tenant it ever saw and knows nothing of time windows,
//     plans or routes. (No top-k library is served by the module proxy
//     here to compare with.) lib=none observes nothing.
//   - BenchmarkInsightsObserve calls Observe alone; BenchmarkInsightsDecision
//     times whole Limiter decisions of tenants over their limit (memory
//     store), so the difference between lib=insights and lib=none is what
//     the tracker adds to a throttled decision, and lib=nop (an Observer
//     that does nothing) shows how much of that is the Limiter's
//     observation point rather than the tracker.
//   - Tenant names are built before the timer starts.

// insightsObserver is one contender: an Observer and how to read what it holds.
type insightsObserver struct {
	name string
	open func(b *testing.B) tollgate.Observer
}

var insightsObservers = []insightsObserver{
	{"insights", func(b *testing.B) tollgate.Observer {
		tr, err := insights.New(insights.WithPlans(tollgate.DefaultPlans()))
		if err != nil {
			b.Fatal(err)
		}
		return tr
	}},
	{"map", func(*testing.B) tollgate.Observer { return &throttleCounts{m: map[string]int64{}} }},
}

// throttleCounts counts throttled requests per tenant, unbounded: the
// hand-written alternative.
type throttleCounts struct {
	mu sync.Mutex
	m  map[string]int64
}

func (c *throttleCounts) Observe(_ context.Context, d *tollgate.Decision) {
	if o := d.Outcome(); o != "denied" && o != "shadow_denied" {
		return
	}
	c.mu.Lock()
	c.m[d.Tenant] += d.Cost
	c.mu.Unlock()
}

// insightsDecision returns a decision of the free plan on the memory store,
// denied or allowed, for the benchmarks to hand observers: the outcome of a
// Decision is the Limiter's to set.
func insightsDecision(b *testing.B, denied bool) tollgate.Decision {
	store := memory.New()
	b.Cleanup(func() { store.Close() })
	plans, err := tollgate.NewStaticResolver(tollgate.DefaultPlans(), "free", nil)
	if err != nil {
		b.Fatal(err)
	}
	l, err := tollgate.New(store, plans, tollgate.WithLogger(nil))
	if err != nil {
		b.Fatal(err)
	}
	req := tollgate.Request{Tenant: "t", Method: "GET", Route: "GET /api/hello"}
	for {
		d, err := l.Take(context.Background(), req)
		if err != nil {
			b.Fatal(err)
		}
		if d.Allowed != denied {
			return d
		}
	}
}

func tenantNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = "tenant-" + strconv.Itoa(i)
	}
	return names
}

// BenchmarkInsightsObserve: one Observe of a throttled request of one of
// 1,000 tenants (all tracked), of one of 1,000,000 (each new to the
// summary, which evicts one: the worst case), and of an allowed request of
// a tenant the tracker does not track (the path of most decisions).
func BenchmarkInsightsObserve(b *testing.B) {
	for _, c := range []struct {
		name    string
		tenants int
		denied  bool
	}{
		{"throttled-1k-tenants", 1000, true},
		{"throttled-1M-tenants", 1_000_000, true},
		{"allowed-untracked", 10_000, false},
	} {
		names := tenantNames(c.tenants)
		for _, ob := range insightsObservers {
			b.Run(fmt.Sprintf("case=%s/lib=%s", c.name, ob.name), func(b *testing.B) {
				o := ob.open(b)
				ctx := context.Background()
				d := insightsDecision(b, c.denied)
				b.ReportAllocs()
				start := cpuTime()
				b.ResetTimer()
				for i := range b.N {
					d.Tenant = names[i%len(names)]
					o.Observe(ctx, &d)
				}
				reportCPU(b, start)
			})
		}
	}
}

// BenchmarkInsightsObserveParallel: throttled Observes of 1,000 tenants
// from every core at once, which contend for the tracker's lock.
func BenchmarkInsightsObserveParallel(b *testing.B) {
	names := tenantNames(1000)
	for _, ob := range insightsObservers {
		b.Run("case=throttled-1k-tenants/lib="+ob.name, func(b *testing.B) {
			o := ob.open(b)
			denied := insightsDecision(b, true)
			var next atomic.Int64
			b.ReportAllocs()
			start := cpuTime()
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(7919))
				d := denied
				for pb.Next() {
					i++
					d.Tenant = names[i%len(names)]
					o.Observe(context.Background(), &d)
				}
			})
			reportCPU(b, start)
		})
	}
}

// insightsSlowPlan refills a token an hour: a tenant emptied before the
// timer starts stays over its limit for the whole run.
var insightsSlowPlan = tollgate.Plan{Name: "slow", Limit: tollgate.Limit{Rate: 1.0 / 3600, Burst: 20}}

// BenchmarkInsightsDecision: a Limiter's decision on a request of a tenant
// over its limit (1,000 tenants, emptied before the timer starts), without
// an observer and with each contender.
func BenchmarkInsightsDecision(b *testing.B) {
	names := tenantNames(1000)
	contenders := append([]insightsObserver{{"none", nil},
		{"nop", func(*testing.B) tollgate.Observer { return nopObserver{} }}}, insightsObservers...)
	for _, ob := range contenders {
		b.Run("case=throttled/lib="+ob.name, func(b *testing.B) {
			opts := []tollgate.Option{tollgate.WithLogger(nil)}
			if ob.open != nil {
				opts = append(opts, tollgate.WithObserver(ob.open(b)))
			}
			l, err := tollgate.New(memory.New(), tollgate.SinglePlan(insightsSlowPlan), opts...)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			req := tollgate.Request{Method: "GET", Route: "GET /api/hello", Cost: 1}
			for _, n := range names {
				req.Tenant = n
				for range 25 {
					_, _ = l.Take(ctx, req)
				}
			}
			b.ReportAllocs()
			start := cpuTime()
			b.ResetTimer()
			for i := range b.N {
				req.Tenant = names[i%len(names)]
				if d, err := l.Take(ctx, req); err != nil || d.Allowed {
					b.Fatalf("allowed %v, %v: the tenants should be over their limit", d.Allowed, err)
				}
			}
			reportCPU(b, start)
		})
	}
}

// BenchmarkInsightsHeap: the heap after a week of throttled requests from
// 1,000,000 tenants, each throttled 3 times, spread evenly over the week,
// and one heavy tenant among them: what each contender holds then, and
// whether it still finds the heavy tenant.
func BenchmarkInsightsHeap(b *testing.B) {
	const tenants = 1_000_000
	names := tenantNames(tenants)
	start := time.Now().Add(-7 * 24 * time.Hour)
	step := 7 * 24 * time.Hour / (3 * tenants)
	denied := insightsDecision(b, true)
	for _, ob := range insightsObservers {
		b.Run("case=heap-1M-tenants-week/lib="+ob.name, func(b *testing.B) {
			var heapMB, maxEntries, buckets float64
			for range b.N {
				b.StopTimer()
				before := memSettledHeap()
				b.StartTimer()
				o := ob.open(b)
				d := denied
				for i := range 3 * tenants {
					d.Time = start.Add(time.Duration(i) * step)
					d.Tenant = names[(i*7919)%tenants]
					o.Observe(context.Background(), &d)
					if i%40 == 0 {
						d.Tenant = "heavy"
						o.Observe(context.Background(), &d)
					}
				}
				b.StopTimer()
				after := memSettledHeap()
				heapMB += (float64(after) - float64(before)) / (1 << 20)
				if tr, ok := o.(*insights.Tracker); ok {
					st := tr.Stats()
					if st.MaxEntries > st.K {
						b.Fatalf("%+v: a bucket holds more than k", st)
					}
					maxEntries += float64(st.MaxEntries)
					buckets += float64(st.Buckets)
					rep, err := tr.Candidates(context.Background(), insights.LastWeek, 1)
					if err != nil || len(rep.Candidates) == 0 {
						b.Fatalf("%v", err)
					}
					// The report's window ends at the wall clock's now: the
					// heavy tenant is first unless the run took a bucket.
					if got := rep.Candidates[0].Tenant; got != "heavy" {
						b.Logf("first candidate %s", got)
					}
				}
				runtime.KeepAlive(o)
				b.StartTimer()
			}
			b.ReportMetric(heapMB/float64(b.N), "heap-MB")
			if buckets > 0 {
				b.ReportMetric(maxEntries/float64(b.N), "max-entries/bucket")
				b.ReportMetric(buckets/float64(b.N), "buckets")
			}
		})
	}
}
