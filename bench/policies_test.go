package bench

import (
	"fmt"
	"testing"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
)

// policiesTenants is the number of tenants of BenchmarkPolicies.
const policiesTenants = 10_000

// BenchmarkPolicies measures what a daily quota adds to a decision on the
// memory store: Limiter.Take on allowed requests of 10,000 tenants whose
// plan is a token bucket alone (policies=bucket) or the same bucket and a
// daily quota, checked together (policies=bucket+daily). The budget is
// 1.3x. `benchstat -col /policies` sets them side by side.
func BenchmarkPolicies(b *testing.B) {
	bucket := tollgate.Limit{Rate: 1e6, Burst: 1e9} // no request reaches it
	plans := map[string]tollgate.Plan{
		"bucket": {Name: "growth", Limit: bucket},
		"bucket+daily": {Name: "growth", Limit: bucket, Policies: []tollgate.Policy{
			{Quota: tollgate.Quota{Tokens: 1e14, Period: tollgate.Daily}},
		}},
	}
	reqs := make([]tollgate.Request, policiesTenants)
	for i := range reqs {
		reqs[i] = tollgate.Request{Tenant: fmt.Sprint("tenant-", i), Method: "GET", Route: "GET /api/hello"}
	}
	for _, mode := range []string{"serial", "parallel"} {
		for _, name := range []string{"bucket", "bucket+daily"} {
			b.Run(fmt.Sprintf("case=%s/policies=%s", mode, name), func(b *testing.B) {
				s := memory.New()
				b.Cleanup(func() { s.Close() })
				l, err := tollgate.New(s, tollgate.SinglePlan(plans[name]), tollgate.WithLogger(nil))
				if err != nil {
					b.Fatal(err)
				}
				runDecisions(b, l, reqs, mode == "parallel")
			})
		}
	}
}
