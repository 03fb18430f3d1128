// Package redisstore is a tollgate.Store that keeps the rate-limit state of
// every tenant in Redis, so that every replica of an API behind a load
// balancer draws from the same buckets and quotas.
//
// A tenant's state is one Redis hash (see Store.Key), with one field per
// rule: a token bucket's theoretical arrival time, a quota's tokens used
// and the end of their period; beside it, a cap on requests in flight
// keeps the leases of its requests in a sorted set of its own, with the
// same hash tag, scored by when each expires. Each Op runs atomically in
// a Lua script (apply.lua) that is given the hash and the sets of the Op's
// caps in KEYS and touches nothing else, on Redis's own clock (TIME), so
// replicas whose clocks disagree still make the same decisions, and count
// a tenant's requests in flight exactly; the decisions are those of the
// reference model, storetest.Model. An Op takes one script call, its caps
// included. Reset deletes the hash, and with it every rule the tenant has
// or had, but leaves the leases of its requests that still run; the hash
// expires when every state in it would be empty, and a set when its last
// lease does, so an idle tenant costs nothing, and the slots of a replica
// that died come free when their leases end. A field that holds no valid
// state is removed, counted as empty and logged; a key of another type
// fails that tenant's calls only, with an error wrapping
// storekit.ErrMisconfigured. Works with a single server, Sentinel, Redis
// Cluster and Ring through go-redis v9.
//
// Calls wait in a queue and go out together on a few connections: one
// round trip carries every call that arrived while the previous one was
// out, and one script call carries the Ops of many tenants, so that Redis
// pays for a script and a clock reading once for all of them. A call fails
// only when Redis has not answered within the timeout (WithTimeout)
// counted from when its command was written; time spent queued or
// dialling, and a reader that a busy machine schedules late, do not count.
// Failed round trips open a circuit breaker (WithCircuitBreaker), which
// then answers at once until a probe succeeds. The Limiter's failure
// policy decides what a failed call means.
//
// Before the first request, a Limiter's New asks the Store to Check itself:
// the connection, the credentials, the database, the permissions to load
// and run the script on keys under the prefix; a misconfiguration fails
// New, and a Redis that may evict keys is logged. The Check also opens
// the connections that the first requests will use.
package redisstore
