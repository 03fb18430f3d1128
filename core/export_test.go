package tollgate

// Test clocks, kept out of the public API.
var (
	WithClock      = withClock
	WithCacheClock = withCacheClock
)
