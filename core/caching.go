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
// The wrapped resolver cannot hurt requests: a request waits for a lookup
// no longer than the Limiter's resolver timeout after the lookup starts
// running; a lookup that panics fails; one that runs past two seconds is
// abandoned (even if it ignores its context), and at most 64 abandoned
// lookups may still be running before new ones fail at once; a failed
// lookup is retried a second later at the earliest. A lookup that finishes
// after its requests gave up still fills the cache.
//
// A plan change takes effect on the tenant's next request after Invalidate,
// or within about a TTL without it. A CachingResolver is safe for concurrent
// use. The zero CachingResolver is not usable; call NewCachingResolver.
type CachingResolver struct {
	ttl           time.Duration
	maxEntries    int
	lookupTimeout time.Duration
	now           func() time.Time
	lookups       flightGroup
	compiled      planCache // shares compiled plans among tenants

	// entries holds tenant -> *cacheEntry. A sync.Map, as hits (every
	// request) must not contend across cores; mu serialises evictions.
	entries sync.Map
	size    atomic.Int64
	mu      sync.Mutex
}

type cacheEntry struct {
	cp      *compiledPlan
	err     error // a failed lookup, remembered until expires
	expires time.Time
}

const (
	// retryFailedAfter is how long a failed lookup is remembered, so a
	// resolver that is down is not asked again on every request.
	retryFailedAfter = time.Second
	// defaultLookupTimeout bounds each lookup of a CachingResolver.
	defaultLookupTimeout = 2 * time.Second
	// defaultMaxEntries is the cache's bound unless NewCachingResolver
	// is given one.
	defaultMaxEntries = 100_000
)

// NewCachingResolver returns a CachingResolver that caches the plans next
// resolves for ttl (> 0), for at most maxEntries tenants (0 means 100,000).
// When the cache is full, expired entries go first, then those closest to
// expiry.
func NewCachingResolver(next PlanResolver, ttl time.Duration, maxEntries int) (*CachingResolver, error) {
	switch {
	case isNil(next):
		return nil, errors.New("tollgate: NewCachingResolver: the wrapped resolver is nil")
	case ttl <= 0:
		return nil, fmt.Errorf("tollgate: NewCachingResolver: ttl must be > 0, got %v", ttl)
	case maxEntries < 0:
		return nil, fmt.Errorf("tollgate: NewCachingResolver: maxEntries must be >= 0, got %d", maxEntries)
	}
	if maxEntries == 0 {
		maxEntries = defaultMaxEntries
	}
	c := &CachingResolver{ttl: ttl, maxEntries: maxEntries, lookupTimeout: defaultLookupTimeout, now: time.Now}
	c.lookups.resolve = next.ResolvePlan
	c.lookups.done = c.learn
	return c, nil
}

// ResolvePlan returns the cached plan of tenant, looking it up when it is
// missing or older than the TTL. It waits for a lookup until ctx is done or
// the lookup is abandoned.
func (c *CachingResolver) ResolvePlan(ctx context.Context, tenant string) (Plan, error) {
	cp, err := c.resolveCompiled(ctx, tenant, c.lookupTimeout)
	if err != nil {
		return Plan{}, err
	}
	return cp.plan, nil
}

func (c *CachingResolver) resolveCompiled(ctx context.Context, tenant string, bound time.Duration) (*compiledPlan, error) {
	if err := checkTenant(tenant); err != nil {
		return nil, err
	}
	now := c.now()
	v, cached := c.entries.Load(tenant)
	var e *cacheEntry
	if cached {
		e = v.(*cacheEntry)
		if now.Before(e.expires) {
			return e.cp, e.err
		}
	}
	f := c.lookups.start(ctx, tenant, min(bound, c.lookupTimeout), c.lookupTimeout, c.fresh)
	if f == nil {
		// A lookup ended since the cache was read: its answer is there.
		return c.resolveCompiled(ctx, tenant, bound)
	}
	if cached && e.err == nil && now.Before(e.expires.Add(c.ttl)) {
		// Stale, but recent: serve it while the lookup runs, so that a
		// busy tenant's requests neither wait on the database each TTL
		// nor fail while it is down.
		return e.cp, nil
	}
	if _, err := f.await(ctx); err != nil {
		return nil, err
	}
	// The lookup's own answer, compiled by learn (or here, if an
	// Invalidate orphaned it).
	if v, ok := c.entries.Load(tenant); ok && v.(*cacheEntry).cp != nil && v.(*cacheEntry).cp.plan.equal(&f.plan) {
		return v.(*cacheEntry).cp, nil
	}
	return c.compiled.get(&f.plan)
}

// fresh reports whether the cache holds an answer for tenant that has not
// expired.
func (c *CachingResolver) fresh(tenant string) bool {
	v, ok := c.entries.Load(tenant)
	return ok && c.now().Before(v.(*cacheEntry).expires)
}

// learn caches the answer of a lookup.
func (c *CachingResolver) learn(tenant string, p Plan, err error) {
	now := c.now()
	if err == nil {
		var cp *compiledPlan
		if cp, err = c.compiled.get(&p); err == nil {
			c.store(tenant, &cacheEntry{cp: cp, expires: now.Add(c.ttl)})
			return
		}
	}
	// A failure replaces no plan that can still be served stale; it is
	// remembered a moment, so that a resolver that is down is not asked
	// again on every request.
	if v, ok := c.entries.Load(tenant); ok {
		if e := v.(*cacheEntry); e.err == nil && now.Before(e.expires.Add(c.ttl)) {
			return
		}
	}
	c.store(tenant, &cacheEntry{err: err, expires: now.Add(retryFailedAfter)})
}

// store caches e for tenant, first evicting an entry if the cache is full.
func (c *CachingResolver) store(tenant string, e *cacheEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, present := c.entries.Load(tenant); !present {
		if c.size.Load() >= int64(c.maxEntries) {
			c.evictLocked()
		}
		c.size.Add(1)
	}
	c.entries.Store(tenant, e)
}

// evictLocked drops one entry: the one closest to expiry (an expired one if
// any) among a sample of 16, which follows the map's hash order, as good as
// random for tenants.
func (c *CachingResolver) evictLocked() {
	var victim string
	var earliest time.Time
	n := 0
	c.entries.Range(func(k, v any) bool {
		if e := v.(*cacheEntry); n == 0 || e.expires.Before(earliest) {
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
// looks the plan up again. Call it when a tenant changes plan. A lookup
// under way when Invalidate is called still answers the requests waiting
// for it, but is not cached: it may predate the change.
func (c *CachingResolver) Invalidate(tenant string) {
	c.mu.Lock()
	c.deleteLocked(tenant)
	c.mu.Unlock()
	c.lookups.forget(tenant)
}

// Len returns the number of tenants cached.
func (c *CachingResolver) Len() int { return int(c.size.Load()) }

// knownPlans: a CachingResolver can not tell which plans its resolver
// gives.
func (c *CachingResolver) knownPlans() []Plan { return nil }

func (c *CachingResolver) compiledPlan(string) *compiledPlan { return nil }
