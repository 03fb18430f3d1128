package metrickit

// An Event is a decision as a Tally counts it, for tests that script
// decisions no Limiter makes on demand (an outcome of a newer core, a plan
// name no resolver would give).
type Event = event

// Count counts e.
func (t *Tally) Count(e Event) { t.count(&e) }
