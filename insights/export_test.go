package insights

// Test clocks, kept out of the public API.
var WithClock = withClock

// Settle merges the closed buckets into the tiers now, as the goroutine
// that a rotation starts does.
func Settle(t *Tracker) { t.settle() }
