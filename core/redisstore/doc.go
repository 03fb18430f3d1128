// Package redisstore is a tollgate.Store that keeps its token buckets in
// Redis, so that every replica of an API behind a load balancer draws from
// one bucket per tenant.
//
// Each decision runs atomically in a Lua script, on the Redis server's clock,
// so replicas whose clocks disagree still make the same decisions: a Take,
// or an Op of several rules (token buckets as tollgate.GCRA computes them,
// calendar quotas whose periods follow Redis's clock), reservations,
// inspection, reset and cancellation (tollgate.MultiStore). A bucket is one
// string key holding its theoretical arrival time in microseconds, which
// expires when the bucket is full again; a quota is a counter per period,
// which expires when its period ends. Every key of a tenant shares the
// tenant's hash tag. Works with a single server, Redis Cluster and Sentinel
// through go-redis v9's UniversalClient.
//
// Keys are isolated: a key of another type fails its own tenant's call only
// (an error wrapping tollgate.ErrMisconfigured, nothing taken), and a string
// that holds no valid state is repaired as a full bucket or an unused quota
// and logged once.
//
// A Store coalesces concurrent calls into shared round trips, denies
// requests for buckets it knows to be empty without a round trip, and
// bounds the harm of a failing Redis with each caller's own deadline, a
// circuit breaker and an optional fallback store; misconfiguration is
// reported as such (tollgate.ErrMisconfigured), by Check before the first
// request. See docs/redis.md in the repository for set-up and failure
// behaviour.
package redisstore
