package tollgate

import "time"

// Test clocks, kept out of the public API.
var WithClock = withClock

// WithLookupTimeout makes c abandon its lookups after d, and
// WithCacheClock makes it read its time from now.
func WithLookupTimeout(c *CachingResolver, d time.Duration)   { c.lookupTimeout = d }
func WithCacheClock(c *CachingResolver, now func() time.Time) { c.now = now }

// CachedPlans returns how many compiled plans l's plan cache holds.
func CachedPlans(l *Limiter) int { return l.compiled.len() }

// StuckLookups returns how many lookups of l, or of c, are stuck.
func StuckLookups(l *Limiter) int64              { return l.lookups.stuck.Load() }
func StuckCacheLookups(c *CachingResolver) int64 { return c.lookups.stuck.Load() }

// SetLeaseRenewal makes l renew the leases of its slots every d; call it
// before l holds any.
func SetLeaseRenewal(l *Limiter, d time.Duration) { l.slots.renewEvery = d }
