// Package tollgate is the engine of per-tenant API rate limiting: a token
// bucket per tenant, computed as GCRA, sized by the tenant's subscription
// plan, with calendar quotas and per-route budgets beside it.
//
// A Limiter resolves a tenant to its Plan, asks a Store to take the
// request's cost from every limit of the plan that applies, in one atomic
// step, applies a failure policy when the Store or the resolver fails,
// reports throttled requests, and returns a Decision: allowed or not, and
// the figures of every policy. The engine knows nothing of HTTP: the
// tollgatehttp package (net/http middleware, tenant extraction, response
// headers) is its first client, and the framework adapters (gin, echo, chi,
// fiber, grpc) are modules built on that.
//
// The in-process Store is in the memory package; the Redis Store, shared by
// many API replicas, is in the redisstore module.
package tollgate
