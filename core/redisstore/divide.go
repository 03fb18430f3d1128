package redisstore

import (
	"context"
	"fmt"
	"reflect"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// A DividedStore is a tollgate.Store that takes from Store under each limit
// divided by Replicas: Rate/Replicas, and Burst/Replicas rounded up; a
// quota's Tokens are divided likewise. It is meant as the fallback of a Redis
// store, over a memory.Store:
//
//	tollgate.New(redisStore, plans,
//		tollgate.WithFallbackStore(redisstore.DividedStore{Store: memory.New(), Replicas: 4}))
//
// While Redis is out of reach each replica then limits on its own, and a
// fleet of Replicas replicas behind a load balancer allows about the limit
// in total, rather than Replicas times it. Decisions made this way are
// marked Degraded by the Limiter.
//
// A request that costs more than the divided burst (or quota) is decided
// under a burst equal to its cost: such a request is valid under the real
// limit, and refusing it for as long as Redis is down would be worse than
// letting a single large request through at the divided rate.
//
// Replicas < 1 counts as 1. A DividedStore is safe for concurrent use if
// Store is. Its zero value has no Store: Check reports that (wrapping
// tollgate.ErrMisconfigured), and Take and Do return that error.
type DividedStore struct {
	Store    tollgate.Store
	Replicas int
}

var (
	_ tollgate.LimitingStore = DividedStore{}
	_ tollgate.MultiStore    = DividedStore{}
	_ tollgate.Checker       = DividedStore{}
)

// Check reports a missing Store (nil, or a nil pointer in the interface) as
// an error wrapping tollgate.ErrMisconfigured, and otherwise asks Store's own
// Check, if it has one. It implements tollgate.Checker.
func (d DividedStore) Check(ctx context.Context) error {
	if err := d.checkStore(); err != nil {
		return err
	}
	if c, ok := d.Store.(tollgate.Checker); ok {
		return c.Check(ctx)
	}
	return nil
}

func (d DividedStore) checkStore() error {
	if d.Store == nil {
		return fmt.Errorf("%w: redisstore.DividedStore has no Store", tollgate.ErrMisconfigured)
	}
	if v := reflect.ValueOf(d.Store); isNilable(v.Kind()) && v.IsNil() {
		return fmt.Errorf("%w: redisstore.DividedStore's Store is a nil %T", tollgate.ErrMisconfigured, d.Store)
	}
	return nil
}

func isNilable(k reflect.Kind) bool {
	switch k {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return true
	}
	return false
}

// Take checks limit and cost as any Store does, then takes cost tokens from
// the bucket of key in Store under the divided limit.
func (d DividedStore) Take(ctx context.Context, key string, limit tollgate.Limit, cost int64) (tollgate.Result, error) {
	if err := limit.Validate(); err != nil {
		return tollgate.Result{}, err
	}
	if err := limit.CheckCost(cost); err != nil {
		return tollgate.Result{}, err
	}
	if err := d.checkStore(); err != nil {
		return tollgate.Result{}, err
	}
	return d.Store.Take(ctx, key, divide(limit, d.Replicas, cost), cost)
}

// Do runs op on Store with every rule divided: token buckets as Take
// divides them, quotas' Tokens by Replicas rounded up (at least op.Cost).
// It implements tollgate.MultiStore. A Store that is not a
// tollgate.MultiStore can run only an OpTake of one token bucket (as a
// Take); any other Op is an error wrapping tollgate.ErrMisconfigured.
func (d DividedStore) Do(ctx context.Context, op *tollgate.Op) error {
	if err := d.checkStore(); err != nil {
		return err
	}
	var buf [4]tollgate.Rule
	rules := buf[:0]
	for _, r := range op.Rules {
		if r.IsQuota() {
			r.Quota = divideQuota(r.Quota, d.Replicas, op.Cost)
		} else {
			r.Limit = divide(r.Limit, d.Replicas, op.Cost)
		}
		rules = append(rules, r)
	}
	ms, ok := d.Store.(tollgate.MultiStore)
	if !ok {
		if op.Kind != tollgate.OpTake || len(rules) != 1 || rules[0].IsQuota() || rules[0].Sub != "" {
			return fmt.Errorf("%w: redisstore.DividedStore: %T runs no %v of %d rules (it is not a tollgate.MultiStore)",
				tollgate.ErrMisconfigured, d.Store, op.Kind, len(rules))
		}
		r, err := d.Store.Take(ctx, op.Key, rules[0].Limit, op.Cost)
		if err != nil {
			return err
		}
		op.Allowed, op.Delay = r.Allowed, 0
		op.Results = append(op.Results[:0], r)
		op.Marks = op.Marks[:0]
		return nil
	}
	orig := op.Rules
	op.Rules = rules
	err := ms.Do(ctx, op)
	op.Rules = orig
	return err
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

func divideQuota(q tollgate.Quota, replicas int, cost int64) tollgate.Quota {
	if replicas <= 1 {
		return q
	}
	n := int64(replicas)
	q.Tokens = max((q.Tokens+n-1)/n, cost)
	return q
}
