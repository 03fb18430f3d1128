package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
)

// policiesTenants is the number of tenants of BenchmarkPolicies.
const policiesTenants = 10_000

// BenchmarkPolicies measures what a daily quota or an in-flight cap adds
// to a decision on the memory store: Limiter.Take on allowed requests of
// 10,000 tenants whose plan is a token bucket alone (policies=bucket), the
// same bucket and a daily quota, checked together (policies=bucket+daily),
// or the bucket and a cap on requests in flight (policies=bucket+inflight),
// whose slot each request gives back with Limiter.Release, as middleware
// does when the handler returns. The budgets are 1.3x for a quota and 1.5x
// for an in-flight cap. `benchstat -col /policies` sets them side by side.
func BenchmarkPolicies(b *testing.B) {
	bucket := tollgate.Limit{Rate: 1e6, Burst: 1e9} // no request reaches it
	plans := map[string]tollgate.Plan{
		"bucket": {Name: "growth", Limit: bucket},
		"bucket+daily": {Name: "growth", Limit: bucket, Policies: []tollgate.Policy{
			{Quota: tollgate.Quota{Tokens: 1e14, Period: tollgate.Daily}},
		}},
		"bucket+inflight": {Name: "growth", Limit: bucket, Policies: []tollgate.Policy{
			{InFlight: 1000},
		}},
	}
	reqs := make([]tollgate.Request, policiesTenants)
	for i := range reqs {
		reqs[i] = tollgate.Request{Tenant: fmt.Sprint("tenant-", i), Method: "GET", Route: "GET /api/hello"}
	}
	for _, mode := range []string{"serial", "parallel"} {
		for _, name := range []string{"bucket", "bucket+daily", "bucket+inflight"} {
			b.Run(fmt.Sprintf("case=%s/policies=%s", mode, name), func(b *testing.B) {
				s := memory.New()
				b.Cleanup(func() { s.Close() })
				l, err := tollgate.New(s, tollgate.SinglePlan(plans[name]), tollgate.WithLogger(nil))
				if err != nil {
					b.Fatal(err)
				}
				if name == "bucket+inflight" {
					runHeldDecisions(b, l, reqs, mode == "parallel")
				} else {
					runDecisions(b, l, reqs, mode == "parallel")
				}
			})
		}
	}
}

// BenchmarkPoliciesPaired is BenchmarkPolicies's bucket and
// bucket+inflight cases over its 10,000 tenants for a machine shared with
// other work: the two plans take turns in short blocks, and the metrics
// are the medians of the blocks (see memPairedSerial and
// memPairedParallel), which a block that was descheduled does not move.
func BenchmarkPoliciesPaired(b *testing.B) {
	bucket := tollgate.Limit{Rate: 1e6, Burst: 1e9} // no request reaches it
	ctx := context.Background()
	var stores []memNamedTake
	for _, name := range []string{"bucket", "inflight"} {
		plan := tollgate.Plan{Name: "growth", Limit: bucket}
		if name == "inflight" {
			plan.Policies = []tollgate.Policy{{InFlight: 1000}}
		}
		s := memory.New()
		b.Cleanup(func() { s.Close() })
		l, err := tollgate.New(s, tollgate.SinglePlan(plan), tollgate.WithLogger(nil))
		if err != nil {
			b.Fatal(err)
		}
		stores = append(stores, memNamedTake{name, func(tenant string) bool {
			d, _ := l.Take(ctx, tollgate.Request{Tenant: tenant, Method: "GET", Route: "GET /api/hello"})
			if err := l.Release(ctx, &d); err != nil {
				b.Error(err)
			}
			return d.Allowed
		}})
	}
	keys := memCloneKeys(memTenantKeys(policiesTenants))
	b.Run("case=serial", func(b *testing.B) {
		memPairedSerial(b, stores, []memPairedCase{{"keys10k", func(_, n int) string { return keys[n%len(keys)] }}})
	})
	b.Run("case=parallel", func(b *testing.B) {
		memPairedParallel(b, stores, []memPairedCase{{"keys10k", func(w, n int) string { return keys[(n+w*len(keys)/2)%len(keys)] }}})
	})
}

// runHeldDecisions is runDecisions for a plan with an in-flight cap: each
// allowed decision holds a slot, given back at once, as a request that
// returns at once would.
func runHeldDecisions(b *testing.B, l *tollgate.Limiter, reqs []tollgate.Request, parallel bool) {
	ctx := context.Background()
	var denied atomic.Int64
	decide := func(req tollgate.Request) {
		d, _ := l.Take(ctx, req)
		if !d.Allowed {
			denied.Add(1)
		}
		if err := l.Release(ctx, &d); err != nil {
			b.Error(err)
		}
	}
	for i := range reqs {
		decide(reqs[i])
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	if !parallel {
		for i := range b.N {
			decide(reqs[i%len(reqs)])
		}
	} else {
		b.RunParallel(func(pb *testing.PB) {
			for i := rand.IntN(len(reqs)); pb.Next(); i = (i + 1) % len(reqs) {
				decide(reqs[i])
			}
		})
	}
	reportCPU(b, cpu)
	if n := denied.Load(); n > 0 {
		b.Fatalf("%d of %d decisions denied; the plans must allow all", n, b.N)
	}
}
