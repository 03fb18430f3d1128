// Package memory is an in-process tollgate.Store for services that run as a
// single instance: GCRA buckets held in a sharded hash table whose lookups
// and updates take no lock.
//
// Each bucket is one word, its theoretical arrival time, updated with a
// compare-and-swap. Buckets that are full again are dropped in the background,
// which changes no decision, and a hard cap on tracked keys bounds memory
// against floods of made-up tenant IDs. When the cap is reached, buckets are
// evicted in order of how little of their burst is spent, so that a flood of
// new keys does not hand throttled tenants a fresh burst; see WithMaxKeys.
//
// # Several limits
//
// A Store is also a tollgate.MultiStore: Do decides on every limit of a
// tenant (a burst rate, daily or monthly quotas, a route's budget) in one
// atomic step, and reserves, cancels, inspects and resets.
//
// A rule's state is one word in the same table as the buckets. The main
// rule (Sub "") is the bucket Take keeps under the tenant's key. Every
// other rule has a slot of its own whose stored bytes are the rule's
// identity (the key, the rule's Sub and, for a quota, its period's start)
// and whose meta carries a flag no tenant key's lookup has, so that no
// tenant key, whatever its bytes, reaches another's rule. A quota's word
// counts the tokens used in its period, a new period being a new slot; the
// slot also records when its period ends, and the sweeper drops it a minute
// after that. Rules count against the key cap like buckets, and rank for
// eviction by the share of their burst, or their quota, that is spent.
//
// An Op on the main bucket alone takes no lock, as Take does. An Op that
// touches another rule holds the tenant's lock (one of a set of mutexes
// striped by key hash), so that the states of its other rules change under
// no one else; it reads every state, decides, and writes the main bucket
// first, by compare-and-swap: if a lock-free Take changed the bucket since
// it was read, the Op starts over, and nothing is written. Once the main
// bucket is written the Op is decided, and its other rules are written. So
// a denied request takes from no rule, and no limit is exceeded however
// many goroutines share a tenant.
//
// Buckets count time in microseconds of the monotonic clock, read through
// the CPU's time-stamp counter where the kernel keeps its clock on it (see
// docs/performance.md for what that costs and saves); quota periods
// follow the wall clock of the Op's Now (tollgate.Quota.Bounds), so a
// decision needs one clock reading, which the Limiter makes. A Store made
// WithClock reads that clock for both.
package memory
