package redisstore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/redis/go-redis/v9"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/redisstore"
	"github.com/tollgate-go/tollgate/core/redistest"
)

func ExampleNew() {
	addr, err := redistest.SharedAddr() // host:port, such as 127.0.0.1:6379
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	// A prefix of its own keeps this example's keys apart from other runs'.
	store, err := redisstore.New(rdb, redisstore.WithPrefix(redistest.KeyPrefix("ExampleNew")))
	if err != nil {
		log.Fatal(err)
	}
	plan := tollgate.Plan{Name: "startup", Limit: tollgate.Limit{Rate: 1, Burst: 2}}
	limiter, err := tollgate.New(store, tollgate.SinglePlan(plan), tollgate.WithLogger(nil))
	if err != nil {
		log.Fatal(err) // a wrong password, a database that does not exist...
	}
	for range 3 {
		d, err := limiter.Take(context.Background(), tollgate.Request{Tenant: "acme"})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("allowed %v, %d left\n", d.Allowed, d.Remaining)
	}
	// Every policy of the tenant is full again.
	if err := limiter.Reset(context.Background(), "acme"); err != nil {
		log.Fatal(err)
	}
	// Output:
	// allowed true, 1 left
	// allowed true, 0 left
	// allowed false, 0 left
}
