package memory

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/storekit"
)

// A Store is an in-process tollgate.Store: it keeps every tenant's limits
// in the memory of the process. It is safe for concurrent use. A Take, or
// an Op on a tenant's main bucket alone, waits for no other request of the
// tenant (it changes the bucket by compare-and-swap) and allocates nothing
// for a tenant the Store holds.
//
// A Store made by New runs a background sweeper; Close stops it, and it
// also stops once the Store is no longer referenced. The zero Store is not
// usable: its methods return an error.
type Store struct {
	tb      *table // nil when the Store is misconfigured or zero
	err     error  // why tb is nil, for a Store made by New
	stopper *stopper
	rules   ruleCache
	journal storekit.Journal // overrides and the change log
}

var (
	_ tollgate.Store     = (*Store)(nil)
	_ storekit.Reporter  = (*Store)(nil)
	_ storekit.InProcess = (*Store)(nil)
)

// New returns a Store configured by opts. An invalid option does not stop
// New: the Store's methods return an error that names it.
func New(opts ...Option) *Store {
	cfg := config{maxKeys: DefaultMaxKeys, sweepInterval: DefaultSweepInterval}
	for i, o := range opts {
		if o == nil {
			cfg.fail("memory: option %d of New is nil", i)
			continue
		}
		o(&cfg)
	}
	if cfg.err != nil {
		return &Store{err: cfg.err}
	}
	tb, st := newTable(cfg.maxKeys, newClock(cfg.clock)), &stopper{stop: make(chan struct{}), done: make(chan struct{})}
	s := &Store{tb: tb, stopper: st}
	if cfg.sweepInterval > 0 {
		// The sweeper holds the table, not the Store, so that the
		// Store can become unreachable and stop it.
		go func() {
			defer close(st.done)
			tb.sweepEvery(cfg.sweepInterval, st.stop)
		}()
		runtime.AddCleanup(s, func(st *stopper) { st.close() }, st)
	} else {
		close(st.done)
	}
	return s
}

var errZeroStore = fmt.Errorf("%w: memory: Store not made by memory.New", storekit.ErrMisconfigured)

// unusable returns why a Store without a table has none.
func (s *Store) unusable() error {
	if s.err != nil {
		return s.err
	}
	return errZeroStore
}

// Do applies op to the rules of its tenant, in one atomic step, at op.Now,
// or at the Store's current time if op.Now is zero; see package storekit.
// ctx is not used: the Store never waits. A Check Op reports an invalid
// option given to New.
func (s *Store) Do(_ context.Context, op *storekit.Op) error {
	if s.tb == nil {
		return s.unusable()
	}
	switch op.Kind {
	case storekit.Check:
		return nil
	case storekit.SaveOverride, storekit.LoadOverrides:
		s.journal.Do(op)
		return nil
	case storekit.Reset:
		s.journal.Do(op)
	case storekit.Take, storekit.Inspect, storekit.Cancel, storekit.Release, storekit.Renew:
	default:
		return fmt.Errorf("%w: memory: unknown Op kind %d", storekit.ErrInvalid, op.Kind)
	}
	for i := range op.Rules {
		if err := checkRule(&op.Rules[i]); err != nil {
			return err
		}
	}
	op.Latency = 0
	if len(op.Rules) == 1 && op.Rules[0].Kind == storekit.Bucket && op.Rules[0].Name == "" &&
		(op.Kind == storekit.Take || op.Kind == storekit.Inspect) {
		s.doMainBucket(op)
		return nil
	}
	if cappedTake(op) {
		s.tb.takeCapped(op)
		return nil
	}
	if (op.Kind == storekit.Release || op.Kind == storekit.Renew) && inFlightOnly(op.Rules) {
		s.tb.doLeases(op)
		return nil
	}
	s.tb.doRules(op)
	return nil
}

func inFlightOnly(rules []storekit.Rule) bool {
	for i := range rules {
		if rules[i].Kind != storekit.InFlight {
			return false
		}
	}
	return true
}

// doMainBucket applies a Take or an Inspect of a tenant's main bucket
// alone: the lock-free path that Take shares.
func (s *Store) doMainBucket(op *storekit.Op) {
	t := s.tb.clock.bucketTime(op.Now)
	take := op.Kind == storekit.Take
	maxDelay := int64(0)
	if take {
		maxDelay = max(op.MaxDelay, 0).Microseconds()
	}
	res, granted, delay := s.tb.takeBucket(op.Tenant, &op.Rules[0], max(op.Cost, 1), maxDelay, t, take)
	op.Results = append(op.Results[:0], res)
	op.Allowed, op.Delay = granted, 0
	if granted {
		op.Delay = usec(delay)
		if take {
			op.Mark = t + delay
		}
	}
}

// checkRule reports a rule that no Limiter would build, on which the
// arithmetic of the Store would go wrong. Every Op checks its rules, so
// the check of a valid bucket, nearly every rule, is inlined.
func checkRule(r *storekit.Rule) error {
	if r.Kind == storekit.Bucket && r.Burst >= 1 && r.Interval >= 1 {
		return nil
	}
	return checkOtherRule(r)
}

// checkOtherRule is checkRule for a rule other than a valid bucket.
func checkOtherRule(r *storekit.Rule) error {
	switch {
	case r.Burst < 1:
		return fmt.Errorf("%w: memory: rule %q has a Burst of %d", storekit.ErrInvalid, r.Name, r.Burst)
	case r.Kind == storekit.Bucket && r.Interval < 1:
		return fmt.Errorf("%w: memory: bucket %q has an Interval of %d", storekit.ErrInvalid, r.Name, r.Interval)
	case r.Kind == storekit.Quota && r.Period == nil:
		return fmt.Errorf("%w: memory: quota %q has no Period", storekit.ErrInvalid, r.Name)
	case r.Kind != storekit.Bucket && r.Kind != storekit.Quota && r.Kind != storekit.InFlight:
		return fmt.Errorf("%w: memory: rule %q has an unknown kind %d", storekit.ErrInvalid, r.Name, r.Kind)
	}
	return nil
}

// Take takes cost tokens from the token bucket of key under limit: the
// main bucket of the tenant key, as a one-rule Take Op does. It returns an
// error wrapping tollgate.ErrInvalidLimit for an invalid limit or a cost
// outside 1 to limit.Burst, and takes nothing then. ctx is not used.
func (s *Store) Take(_ context.Context, key string, limit tollgate.Limit, cost int64) (tollgate.Result, error) {
	if s.tb == nil {
		return tollgate.Result{}, s.unusable()
	}
	rule := s.rules.cached(limit)
	if rule == nil {
		var err error
		if rule, err = s.rules.add(limit); err != nil {
			return tollgate.Result{}, err
		}
	}
	if cost < 1 || cost > limit.Burst {
		return tollgate.Result{}, fmt.Errorf("%w: cost must be 1 to the burst, %d; got %d", storekit.ErrInvalid, limit.Burst, cost)
	}
	var t int64
	if c := &s.tb.clock; c.read == nil {
		t = c.sinceOrigin() // the clock's now in its common case, inlined
	} else {
		t = c.now()
	}
	res, _, _ := s.tb.takeBucket(key, rule, cost, 0, t, true)
	return res, nil
}

// A ruleCache keeps the rules of the limits that Take was given lately, so
// that a Take of a limit seen before skips checking and converting it: two
// float divisions, a sixth of a Take. A slot holds the last limit that
// hashed to it.
type ruleCache [64]atomic.Pointer[cachedRule]

type cachedRule struct {
	limit tollgate.Limit
	rule  storekit.Rule
}

// cached returns the rule of limit if the cache holds it, or nil. It is
// apart from add so that Go inlines it in Take.
func (c *ruleCache) cached(limit tollgate.Limit) *storekit.Rule {
	if e := c.slot(limit).Load(); e != nil && e.limit == limit {
		return &e.rule
	}
	return nil
}

// add returns the rule of limit, or why limit is not valid, and keeps the
// rule in limit's slot.
func (c *ruleCache) add(limit tollgate.Limit) (*storekit.Rule, error) {
	if err := limit.Validate(); err != nil {
		return nil, err
	}
	e := &cachedRule{limit: limit, rule: storekit.BucketRule(limit.Rate, limit.Burst)}
	c.slot(limit).Store(e)
	return &e.rule, nil
}

// slot returns the slot that limit hashes to.
func (c *ruleCache) slot(limit tollgate.Limit) *atomic.Pointer[cachedRule] {
	return &c[(math.Float64bits(limit.Rate)^uint64(limit.Burst))*0x9e3779b97f4a7c15>>58]
}

// Stats returns the Store's counters: the tenants it holds, and the
// evictions it made to honour its cap. DrainedEvictions counts those of
// tenants with two fifths or more of a limit spent, which includes every
// tenant at half or more; it stays 0 unless the cap is too small for the
// tenants being limited (see WithMaxKeys).
func (s *Store) Stats() storekit.Stats {
	if s.tb == nil {
		return storekit.Stats{}
	}
	n := 0
	for i := range s.tb.shards {
		sh := &s.tb.shards[i].shard
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return storekit.Stats{Tenants: int64(n), Evictions: s.tb.evictions.Load(), DrainedEvictions: s.tb.drained.Load()}
}

// Close stops the background sweeper; the Store keeps working, and idle
// tenants are then dropped only when the Store reaches its cap. Close
// always returns nil.
func (s *Store) Close() error {
	if s.stopper != nil {
		s.stopper.close()
	}
	return nil
}

type stopper struct {
	once sync.Once
	stop chan struct{} // closed to stop the sweeper
	done chan struct{} // closed once it has stopped
}

func (s *stopper) close() { s.once.Do(func() { close(s.stop) }) }

// InProcess marks the Store as one that keeps its state in the process
// of its Limiter: see storekit.InProcess.
func (s *Store) InProcess() {}
