package insights

// Test clocks, kept out of the public API.
var WithClock = withClock

// Settle merges the closed buckets into the tiers now, as the goroutine
// that a rotation starts does.
func Settle(t *Tracker) { t.settle() }

// An Event is a decision as a Tracker counts it, for tests that script
// decisions a Limiter does not make on demand.
type Event = observed

// Record counts e as Observe counts a decision.
func Record(t *Tracker, e Event) { t.record(&e) }

// FleetReadTimeout is how long a report waits for the Exchange.
const FleetReadTimeout = fleetReadTimeout
