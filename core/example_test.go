package tollgate_test

import (
	"context"
	"fmt"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
)

func Example() {
	plans, _ := tollgate.NewStaticResolver(tollgate.DefaultPlans(), "free", map[string]string{
		"acme": "enterprise",
	})
	store := memory.New()
	defer store.Close()
	limiter, err := tollgate.New(store, plans)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 0; i < 21; i++ {
		d, _ := limiter.Take(ctx, tollgate.Request{Tenant: "initech"})
		if !d.Allowed {
			fmt.Printf("request %d denied on plan %s; retry in %v\n", i+1, d.Plan, d.RetryAfter.Round(100*time.Millisecond))
		}
	}
	d, _ := limiter.Take(ctx, tollgate.Request{Tenant: "acme", Cost: 10})
	fmt.Printf("acme: allowed=%v, %d of %d tokens left\n", d.Allowed, d.Remaining, d.Capacity())
	// Output:
	// request 21 denied on plan free; retry in 500ms
	// acme: allowed=true, 1990 of 2000 tokens left
}

func ExampleCachingResolver() {
	// lookupPlan stands in for a query of the application's database.
	lookupPlan := func(ctx context.Context, tenant string) (tollgate.Plan, error) {
		if tenant == "globex" {
			return tollgate.DefaultPlans()[2], nil
		}
		return tollgate.DefaultPlans()[0], nil
	}
	plans, err := tollgate.NewCachingResolver(tollgate.PlanResolverFunc(lookupPlan), time.Minute, 0)
	if err != nil {
		panic(err)
	}
	p, _ := plans.ResolvePlan(context.Background(), "globex")
	fmt.Println(p.Name, p.Limit)
	// When globex changes plan:
	plans.Invalidate("globex")
	// Output:
	// growth 500 burst at 50/s
}

func ExamplePlan() {
	// Free: 2 requests a second in bursts of 20, 1,000 a day, and report
	// exports drawing from a budget of 10 an hour too.
	free := tollgate.Plan{
		Name:  "free",
		Limit: tollgate.Limit{Rate: 2, Burst: 20},
		Policies: []tollgate.Policy{
			{Quota: tollgate.Quota{Tokens: 1000, Period: tollgate.Daily}},
			{Budget: "exports", Limit: tollgate.Limit{Rate: 10.0 / 3600, Burst: 10}},
		},
	}
	fmt.Println(free.Validate())
	// Output:
	// <nil>
}
