package tollgate

// Test clocks, kept out of the public API.
var (
	WithClock      = withClock
	WithCacheClock = withCacheClock
)

// CachedPlans returns how many compiled plans l's plan cache holds.
func CachedPlans(l *Limiter) int {
	if m := l.compiled.plans.Load(); m != nil {
		return len(*m)
	}
	return 0
}
