package redisstore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/redis/go-redis/v9"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/redisstore"
	"github.com/tollgate-go/tollgate/internal/testredis"
)

func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{
		Addr: mainRedis, // host:port, such as 127.0.0.1:6379
		// Lets a Take that finds the store idle make its own round trip.
		ContextTimeoutEnabled: true,
	})
	defer rdb.Close()
	// A prefix of its own keeps this example's buckets apart from other runs'.
	store, err := redisstore.New(rdb, redisstore.WithPrefix(testredis.KeyPrefix("ExampleNew")))
	if err != nil {
		log.Fatal(err)
	}
	limit := tollgate.Limit{Rate: 1, Burst: 2}
	for range 3 {
		r, err := store.Take(context.Background(), "acme", limit, 1)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("allowed %v, %d left\n", r.Allowed, r.Remaining)
	}
	// Output:
	// allowed true, 1 left
	// allowed true, 0 left
	// allowed false, 0 left
}

func ExampleDividedStore() {
	// A Redis that is down: nothing listens on this port.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer rdb.Close()
	store, err := redisstore.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	// Four replicas share the plan's 8 tokens through Redis; while Redis is
	// out of reach, each one allows a quarter of them on its own.
	plan := tollgate.Plan{Name: "startup", Limit: tollgate.Limit{Rate: 4, Burst: 8}}
	limiter, err := tollgate.New(store, tollgate.SinglePlan(plan), tollgate.WithLogger(nil),
		tollgate.WithFallbackStore(redisstore.DividedStore{Store: memory.New(), Replicas: 4}))
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		d, err := limiter.Take(context.Background(), tollgate.Request{Tenant: "acme"})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("allowed %v, degraded %v, %d left\n", d.Allowed, d.Degraded, d.Remaining)
	}
	// Output:
	// allowed true, degraded true, 1 left
	// allowed true, degraded true, 0 left
	// allowed false, degraded true, 0 left
}
