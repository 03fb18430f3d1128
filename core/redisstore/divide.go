package redisstore

import (
	"context"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// A DividedStore is a tollgate.Store that takes from Store under each limit
// divided by Replicas: Rate/Replicas, and Burst/Replicas rounded up. It is
// meant as the fallback of a Redis store, over a memory.Store:
//
//	tollgate.New(redisStore, plans,
//		tollgate.WithFallbackStore(redisstore.DividedStore{Store: memory.New(), Replicas: 4}))
//
// While Redis is out of reach each replica then limits on its own, and a
// fleet of Replicas replicas behind a load balancer allows about the limit
// in total, rather than Replicas times it. Decisions made this way are
// marked Degraded by the Limiter.
//
// A request that costs more than the divided burst is decided under a burst
// equal to its cost: such a request is valid under the real limit, and
// refusing it for as long as Redis is down would be worse than letting a
// single large request through at the divided rate.
//
// Replicas < 1 counts as 1. A DividedStore is safe for concurrent use if
// Store is; its zero value has no Store and must not be used.
type DividedStore struct {
	Store    tollgate.Store
	Replicas int
}

var _ tollgate.LimitingStore = DividedStore{}

// Take checks limit and cost as any Store does, then takes cost tokens from
// the bucket of key in Store under the divided limit.
func (d DividedStore) Take(ctx context.Context, key string, limit tollgate.Limit, cost int64) (tollgate.Result, error) {
	if err := limit.Validate(); err != nil {
		return tollgate.Result{}, err
	}
	if err := limit.CheckCost(cost); err != nil {
		return tollgate.Result{}, err
	}
	return d.Store.Take(ctx, key, divide(limit, d.Replicas, cost), cost)
}

// LimitFor returns the divided limit that a Take of cost under limit is
// decided by, so that the Limiter's response headers describe the bucket
// that decided. It implements tollgate.LimitingStore.
func (d DividedStore) LimitFor(limit tollgate.Limit, cost int64) tollgate.Limit {
	return divide(limit, d.Replicas, cost)
}

func divide(limit tollgate.Limit, replicas int, cost int64) tollgate.Limit {
	if replicas <= 1 {
		return limit
	}
	n := int64(replicas)
	l := tollgate.Limit{
		Rate:  limit.Rate / float64(replicas),
		Burst: max((limit.Burst+n-1)/n, cost),
	}
	if l.Validate() != nil {
		// Only a limit within a hair of tollgate.MaxWindow gets here;
		// over a century-long window a divided rate makes no difference.
		return limit
	}
	return l
}
