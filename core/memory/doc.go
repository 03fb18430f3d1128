// Package memory is the in-process tollgate.Store, for a service that runs
// as a single instance, or as the fallback of a shared store: every
// tenant's limits live in the memory of the process.
//
// # How it decides
//
// The Store makes the decisions of the reference model in package
// tollgate/core/storetest, figures included; the conformance kit there
// checks it. Token buckets are GCRA: a bucket's state is one number, its
// theoretical arrival time (TAT), in microseconds of the monotonic clock.
// A quota's state is the tokens used and the end of the period they count
// in, on the wall clock of the Op's time (storekit.Rule.Period). A cap on
// requests in flight (storekit.InFlight) counts the slots a Limiter's
// requests hold, which need no lease: they live in the same process as the
// requests (see storekit.InProcess). A Limiter gives one back through the
// storekit.Held its Take returned, by an atomic decrement. Slots taken
// under a lease, as other callers may, are kept with when each expires,
// on the monotonic clock; a lease that expires is dropped, so that the
// slots of requests whose Release never comes free again. An Op is
// decided at its Now, which the Limiter sets with one clock reading; a
// Take, and an Op without a Now, read the clock once.
//
// Each tenant's main bucket, the one Take uses (Rule.Name ""), is a word
// that a request moves by compare-and-swap: a Take, or an Op on the main
// bucket alone, takes no lock, neither to find the tenant nor to change
// its bucket. An Op on several rules holds the tenant's lock, so that
// its other rules change under no one else; it reads every state, decides,
// and writes the main bucket first, by compare-and-swap: if a lock-free
// Take moved it meanwhile, the Op decides again, having written nothing.
// So a denied request takes from no rule, and no limit is exceeded however
// many goroutines share a tenant. A Take of the main bucket and caps alone,
// every request of a plan with a cap, checks the caps and takes a slot
// under the tenant's lock without the working copies of the general path.
// A Release or a Renew of a lease changes it under the tenant's lock and
// touches nothing else.
//
// # Bounds
//
// A missing bucket and a full one are the same state, and so are a
// missing quota and one with nothing used in its period, and a missing cap
// and one with no slot held: a tenant whose rules are all in that state
// is dropped by a background sweeper (see WithSweepInterval), which
// changes no decision. A cap holds at most its burst of slots.
//
// The Store holds at most a fixed number of tenants (WithMaxKeys, a
// million by default), so that a flood of made-up tenant IDs cannot
// exhaust memory. Tenants live in shards, open-addressing tables each
// holding a share of the cap. A new tenant that finds its shard full makes room: idle
// tenants go first, then, if that is not enough, the tenants with the
// least of a limit spent, so that a flood does not hand the tenants being
// throttled a fresh burst; a tenant with a request in flight is kept as a
// throttled one is, as forgetting its slots would let more requests run
// than its cap. Stats counts evictions. A tenant ID of more
// than 64 bytes is kept as its SHA-256 digest, so that long IDs cost no
// more than short ones; IDs of any bytes work and never share a state.
package memory
