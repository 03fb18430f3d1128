package tollgate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// A CachingResolver wraps a slow PlanResolver, typically a database query,
// with a cache: each tenant's plan is looked up at most once per TTL,
// concurrent lookups for one tenant are shared, and the cache holds a
// bounded number of tenants. A plan older than the TTL is still served for
// one more TTL while a lookup in the background refreshes it, so requests
// wait on the wrapped resolver only for tenants not seen lately, and a
// database outage shorter than the TTL goes unnoticed.
//
// The wrapped resolver cannot hurt requests: a lookup that panics fails,
// one that overruns the lookup timeout (even ignoring its context) is
// abandoned and failed, and a failed lookup is retried after a second at
// the earliest. Tenant IDs longer than MaxTenantLength are refused, so the
// cache holds at most its entry bound times about MaxTenantLength plus one
// plan (a plan is bounded too: 16 policies, 64-character names).
//
// A plan change takes effect on the tenant's next request after Invalidate,
// or within about a TTL without it. A CachingResolver is safe for concurrent
// use. The zero CachingResolver is not usable; call NewCachingResolver.
type CachingResolver struct {
	next          PlanResolver
	ttl           time.Duration
	maxEntries    int
	lookupTimeout time.Duration
	now           func() time.Time

	// entries holds tenant -> cachedPlan. A sync.Map, as hits (every
	// request) must not contend across cores; mu serialises the misses.
	entries sync.Map
	size    atomic.Int64
	mu      sync.Mutex
	flights map[string]*flight
	stuck   atomic.Int64 // lookups still running past their timeout
}

type cachedPlan struct {
	plan    Plan
	expires time.Time
	err     error // a failed lookup, remembered until expires
}

type flight struct {
	done chan struct{}
	plan Plan
	err  error
}

// closed is the done channel of a flight that needed no lookup.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

const (
	// retryFailedAfter is how long a failed lookup is remembered, so a
	// resolver that is down is not asked again on every request.
	retryFailedAfter = time.Second
	// maxStuckLookups bounds the goroutines left behind by a resolver
	// that ignores its context; past it, lookups fail at once.
	maxStuckLookups = 64
)

// A CachingOption configures a CachingResolver.
type CachingOption func(*CachingResolver)

// WithMaxEntries bounds the number of tenants cached (default 100,000). When
// the cache is full, expired entries go first, then those closest to expiry.
func WithMaxEntries(n int) CachingOption {
	return func(c *CachingResolver) { c.maxEntries = n }
}

// WithLookupTimeout bounds each lookup made through the wrapped resolver
// (default 2 s). A lookup is shared by every request waiting for it, so it
// does not end when the request that started it is cancelled; each request
// waits at most its own deadline (see WithResolverTimeout).
func WithLookupTimeout(d time.Duration) CachingOption {
	return func(c *CachingResolver) { c.lookupTimeout = d }
}

// withCacheClock makes the cache read its time from now; tests reach it
// through export_test.go.
func withCacheClock(now func() time.Time) CachingOption {
	return func(c *CachingResolver) { c.now = now }
}

// NewCachingResolver returns a CachingResolver that caches the plans that
// next resolves for ttl (> 0).
func NewCachingResolver(next PlanResolver, ttl time.Duration, opts ...CachingOption) (*CachingResolver, error) {
	c := &CachingResolver{
		next:          next,
		ttl:           ttl,
		maxEntries:    100_000,
		lookupTimeout: 2 * time.Second,
		now:           time.Now,
		flights:       make(map[string]*flight),
	}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	switch {
	case isNil(next):
		return nil, errors.New("tollgate: NewCachingResolver: the wrapped resolver is nil")
	case ttl <= 0:
		return nil, fmt.Errorf("tollgate: NewCachingResolver: ttl must be > 0, got %v", ttl)
	case c.maxEntries < 1:
		return nil, fmt.Errorf("tollgate: NewCachingResolver: WithMaxEntries must be >= 1, got %d", c.maxEntries)
	case c.lookupTimeout <= 0:
		return nil, fmt.Errorf("tollgate: NewCachingResolver: WithLookupTimeout must be > 0, got %v", c.lookupTimeout)
	}
	return c, nil
}

// ResolvePlan returns the cached plan of tenant, looking it up when it is
// missing or older than the TTL. It waits for a lookup until ctx is done.
func (c *CachingResolver) ResolvePlan(ctx context.Context, tenant string) (Plan, error) {
	return c.resolveWithin(ctx, tenant, 0)
}

// resolveWithin is ResolvePlan waiting no longer than timeout (if > 0).
func (c *CachingResolver) resolveWithin(ctx context.Context, tenant string, timeout time.Duration) (Plan, error) {
	if err := checkTenant(tenant); err != nil {
		return Plan{}, err
	}
	now := c.now()
	var e cachedPlan
	v, ok := c.entries.Load(tenant)
	if ok {
		e = v.(cachedPlan)
		if now.Before(e.expires) {
			return e.plan, e.err
		}
	}
	f := c.startLookup(ctx, tenant, now)
	if ok && e.err == nil && now.Before(e.expires.Add(c.ttl)) {
		// Stale, but recent: serve it while the lookup runs, so that a
		// busy tenant's requests do not all wait on the database each
		// TTL, nor fail while it is down.
		return e.plan, nil
	}
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-f.done:
	case <-ctx.Done():
		return Plan{}, ctx.Err()
	case <-expired:
		return Plan{}, errResolverTimeout
	}
	if f.err != nil {
		return Plan{}, f.err
	}
	return f.plan, nil
}

// startLookup returns the lookup of tenant under way, starting one if none
// is and no lookup has just finished.
func (c *CachingResolver) startLookup(ctx context.Context, tenant string, now time.Time) *flight {
	c.mu.Lock()
	defer c.mu.Unlock()
	// A lookup may have finished since the caller missed the cache.
	if v, ok := c.entries.Load(tenant); ok && now.Before(v.(cachedPlan).expires) {
		e := v.(cachedPlan)
		return &flight{done: closed, plan: e.plan, err: e.err}
	}
	f, inFlight := c.flights[tenant]
	if inFlight {
		return f
	}
	f = &flight{done: make(chan struct{})}
	if c.stuck.Load() >= maxStuckLookups {
		f.err = fmt.Errorf("tollgate: CachingResolver: %d lookups are stuck in the wrapped resolver; not starting another", maxStuckLookups)
		close(f.done)
		return f
	}
	c.flights[tenant] = f
	go c.lookup(context.WithoutCancel(ctx), tenant, f)
	return f
}

// lookup asks the wrapped resolver for tenant's plan and settles f with the
// answer, or with an error if the resolver panics or overruns the lookup
// timeout.
func (c *CachingResolver) lookup(ctx context.Context, tenant string, f *flight) {
	ctx, cancel := context.WithTimeout(ctx, c.lookupTimeout)
	defer cancel()
	type answer struct {
		plan Plan
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		p, err := safeResolve(func() (Plan, error) { return c.next.ResolvePlan(ctx, tenant) })
		if err == nil {
			err = p.Validate()
		}
		done <- answer{p, err}
	}()
	var a answer
	select {
	case a = <-done:
	case <-ctx.Done():
		// The resolver ignores its context: leave it behind, counted.
		c.stuck.Add(1)
		go func() { <-done; c.stuck.Add(-1) }()
		a.err = fmt.Errorf("%w: the lookup overran %v", errResolverTimeout, c.lookupTimeout)
	}
	f.plan, f.err = a.plan, a.err
	c.mu.Lock()
	// An Invalidate during the lookup orphans this flight: its answer may
	// predate the plan change, so it is given to its waiters but not kept.
	current := c.flights[tenant] == f
	if current {
		delete(c.flights, tenant)
		if f.err == nil {
			c.storeLocked(tenant, cachedPlan{plan: f.plan, expires: c.now().Add(c.ttl)})
		} else if v, ok := c.entries.Load(tenant); !ok || v.(cachedPlan).err != nil || !c.now().Before(v.(cachedPlan).expires.Add(c.ttl)) {
			// A failure replaces no plan that can still be served stale;
			// it is remembered a moment, so that a resolver that is down
			// is not asked again on every request.
			c.storeLocked(tenant, cachedPlan{err: f.err, expires: c.now().Add(retryFailedAfter)})
		}
	}
	c.mu.Unlock()
	close(f.done)
}

// storeLocked caches e for tenant, first evicting an entry if the cache is
// full.
func (c *CachingResolver) storeLocked(tenant string, e cachedPlan) {
	if _, present := c.entries.Load(tenant); !present {
		if c.size.Load() >= int64(c.maxEntries) {
			c.evictLocked()
		}
		c.size.Add(1)
	}
	c.entries.Store(tenant, e)
}

// evictLocked drops one entry: the one closest to expiry (an expired one if
// any) among a sample of 16. The sample follows the map's hash order, which
// is as good as random for tenants.
func (c *CachingResolver) evictLocked() {
	var victim string
	var earliest time.Time
	n := 0
	c.entries.Range(func(k, v any) bool {
		e := v.(cachedPlan)
		if n == 0 || e.expires.Before(earliest) {
			victim, earliest = k.(string), e.expires
		}
		n++
		return n < 16
	})
	if n > 0 {
		c.deleteLocked(victim)
	}
}

func (c *CachingResolver) deleteLocked(tenant string) {
	if _, loaded := c.entries.LoadAndDelete(tenant); loaded {
		c.size.Add(-1)
	}
}

// Invalidate forgets the cached plan of tenant, so that its next request
// looks the plan up again. Call it when a tenant changes plan.
func (c *CachingResolver) Invalidate(tenant string) {
	c.mu.Lock()
	c.deleteLocked(tenant)
	delete(c.flights, tenant)
	c.mu.Unlock()
}

// Len returns the number of tenants cached.
func (c *CachingResolver) Len() int {
	return int(c.size.Load())
}
