package storetest

import (
	"context"
	"sync"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// A Model is the reference tollgate.MultiStore: a map under one mutex that
// applies every Op exactly as tollgate.Op documents it, in the plainest
// code. It is slow and unbounded, which makes it the yardstick that real
// stores are checked against, and a store for tests whose subject is not
// the store. It is safe for concurrent use. The zero Model is not usable;
// call NewModel.
type Model struct {
	now     func() time.Time
	mu      sync.Mutex
	buckets map[modelKey]int64 // TAT, µs since the Unix epoch
	quotas  map[modelKey]quotaUse
}

type modelKey struct{ key, sub string }

type quotaUse struct {
	period int64 // the period's start, µs since the Unix epoch
	used   int64
}

var _ tollgate.MultiStore = (*Model)(nil)

// NewModel returns a Model that reads its time from now.
func NewModel(now func() time.Time) *Model {
	return &Model{now: now, buckets: map[modelKey]int64{}, quotas: map[modelKey]quotaUse{}}
}

// Take takes cost tokens from the bucket of key under limit.
func (m *Model) Take(ctx context.Context, key string, limit tollgate.Limit, cost int64) (tollgate.Result, error) {
	if err := (tollgate.Rule{Limit: limit}).Validate(cost); err != nil {
		return tollgate.Result{}, err
	}
	op := tollgate.Op{Kind: tollgate.OpTake, Key: key, Rules: []tollgate.Rule{{Limit: limit}}, Cost: cost}
	if err := m.Do(ctx, &op); err != nil {
		return tollgate.Result{}, err
	}
	return op.Results[0], nil
}

// Do applies op.
func (m *Model) Do(_ context.Context, op *tollgate.Op) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	wall := m.now()
	now := wall.UnixMicro()
	switch op.Kind {
	case tollgate.OpReset:
		for _, r := range op.Rules {
			k := modelKey{op.Key, r.Sub}
			delete(m.buckets, k)
			delete(m.quotas, k)
		}
		return nil
	case tollgate.OpCancel:
		for i, r := range op.Rules {
			if i < len(op.Marks) {
				m.cancel(op, r, op.Marks[i], now)
			}
		}
		return nil
	}
	op.Results, op.Marks = op.Results[:0], op.Marks[:0]
	op.Allowed, op.Delay = true, 0
	maxDelay := int64(0)
	if op.Kind == tollgate.OpTake {
		maxDelay = op.MaxDelay.Microseconds()
	}
	type change struct {
		k      modelKey
		bucket bool
		tat    int64
		use    quotaUse
	}
	var changes []change
	var after []tollgate.Result // each rule's result if the request is granted
	var delay int64
	for _, r := range op.Rules {
		k := modelKey{op.Key, r.Sub}
		if r.IsQuota() {
			start, end := r.Quota.Bounds(wall)
			period := start.UnixMicro()
			use := m.quotas[k]
			if use.period != period {
				use = quotaUse{period: period}
			}
			left := end.UnixMicro() - now
			// The quota as it is, without the request.
			now := tollgate.Result{Remaining: r.Quota.Tokens - use.used}
			if use.used > 0 {
				now.ResetAfter = us(left)
			}
			if use.used+op.Cost <= r.Quota.Tokens {
				now.Allowed = true
				after = append(after, tollgate.Result{Allowed: true, Remaining: r.Quota.Tokens - use.used - op.Cost, ResetAfter: us(left)})
				changes = append(changes, change{k: k, use: quotaUse{period, use.used + op.Cost}})
			} else {
				now.RetryAfter = us(left)
				after = append(after, now)
				op.Allowed = false
			}
			op.Results = append(op.Results, now)
			op.Marks = append(op.Marks, period)
			continue
		}
		interval := r.Limit.TokenInterval()
		tolerance := r.Limit.Burst * interval
		tat := max(m.buckets[k], now)
		newTAT := tat + op.Cost*interval
		ahead := newTAT - now
		// The bucket as it is, without the request.
		res := tollgate.Result{Remaining: max(tolerance-(tat-now), 0) / interval, ResetAfter: us(tat - now)}
		switch {
		case ahead <= tolerance:
			res.Allowed = true
			after = append(after, tollgate.Result{Allowed: true, Remaining: (tolerance - ahead) / interval, ResetAfter: us(ahead)})
		case ahead-tolerance <= maxDelay:
			res.Allowed = true
			after = append(after, tollgate.Result{Allowed: true, ResetAfter: us(ahead)})
			delay = max(delay, ahead-tolerance)
		default:
			res.RetryAfter = us(ahead - tolerance)
			after = append(after, res)
			op.Allowed = false
		}
		op.Results = append(op.Results, res)
		op.Marks = append(op.Marks, newTAT)
		changes = append(changes, change{k: k, bucket: true, tat: newTAT})
	}
	if !op.Allowed {
		op.Marks = op.Marks[:0]
		return nil
	}
	if op.Kind != tollgate.OpTake {
		op.Marks = op.Marks[:0]
		return nil
	}
	op.Delay = us(delay)
	op.Results = append(op.Results[:0], after...)
	for _, c := range changes {
		if c.bucket {
			m.buckets[c.k] = c.tat
		} else {
			m.quotas[c.k] = c.use
		}
	}
	return nil
}

// cancel gives back what rule r of a granted OpTake took, as mark records
// it: a bucket's TAT after the take, or a quota's period.
func (m *Model) cancel(op *tollgate.Op, r tollgate.Rule, mark, now int64) {
	k := modelKey{op.Key, r.Sub}
	if r.IsQuota() {
		if use, ok := m.quotas[k]; ok && use.period == mark {
			use.used = max(use.used-op.Cost, 0)
			m.quotas[k] = use
		}
		return
	}
	interval := r.Limit.TokenInterval()
	need := op.Cost * interval
	if now >= mark-r.Limit.Burst*interval {
		return // the reserved time has come: the tokens are spent
	}
	tat, ok := m.buckets[k]
	if !ok || tat < mark {
		return // reset meanwhile: nothing left to give back
	}
	// Later requests took (tat - mark) after this one; only what they do
	// not depend on comes back.
	restore := need - (tat - mark)
	if restore <= 0 {
		return
	}
	if tat-restore <= now {
		delete(m.buckets, k)
		return
	}
	m.buckets[k] = tat - restore
}

func us(n int64) time.Duration { return time.Duration(n) * time.Microsecond }
