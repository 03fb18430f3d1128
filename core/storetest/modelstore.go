package storetest

import (
	"context"
	"sync"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/storekit"
)

// A ModelStore is Model as a tollgate.Store: the reference semantics behind
// one mutex, on the clock it is given. It is slow and unbounded, which makes
// it a store for tests whose subject is not the store (the HTTP conformance
// kit, the Limiter's tests). It is safe for concurrent use. The zero
// ModelStore is not usable; call NewModelStore.
type ModelStore struct {
	now   func() time.Time
	mu    sync.Mutex
	model Model
}

var _ tollgate.Store = (*ModelStore)(nil)

// NewModelStore returns a ModelStore that reads its time from now.
func NewModelStore(now func() time.Time) *ModelStore {
	return &ModelStore{now: now}
}

// Take takes cost tokens from the bucket of key under limit.
func (s *ModelStore) Take(ctx context.Context, key string, limit tollgate.Limit, cost int64) (tollgate.Result, error) {
	if err := limit.Validate(); err != nil {
		return tollgate.Result{}, err
	}
	return storekit.TakeRule(ctx, s, key, storekit.BucketRule(limit.Rate, limit.Burst), cost)
}

// Do applies op at the store's time.
func (s *ModelStore) Do(_ context.Context, op *storekit.Op) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.model.Do(op, s.now())
	return nil
}
