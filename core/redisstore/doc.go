// Package redisstore is a tollgate.Store that keeps its token buckets in
// Redis, so that every replica of an API behind a load balancer draws from
// one bucket per tenant.
//
// Each decision is tollgate.GCRA run atomically in a Lua script, on the Redis
// server's clock, so replicas whose clocks disagree still make the same
// decisions. A bucket is one string key holding its theoretical arrival time
// in microseconds, which expires when the bucket is full again. Works with a
// single server, Redis Cluster and Sentinel through go-redis v9's
// UniversalClient.
//
// A Store coalesces concurrent Takes into one round trip, denies requests
// for buckets it knows to be empty without a round trip, and bounds the harm
// of a failing Redis with a timeout, a circuit breaker and an optional
// fallback store. See docs/redis.md in the repository for set-up and failure
// behaviour.
package redisstore
