// Package tollgatehttp limits the requests to a net/http server per tenant
// with a tollgate.Limiter: Middleware, its options, and the ways to find a
// request's tenant (a header, a context value set by authentication, or
// the client's address behind trusted proxies).
//
// Every limited response carries the rate-limit headers X-RateLimit-Limit,
// X-RateLimit-Remaining, X-RateLimit-Reset, RateLimit-Policy and RateLimit
// (draft-ietf-httpapi-ratelimit-headers); a denied request gets 429 with
// Retry-After and an RFC 9457 problem details body naming the policies that
// denied and the seconds to wait. A request that holds a slot of an
// in-flight policy (tollgate.Policy.InFlight) gives it back when the
// handler returns.
//
// The framework adapters (gin, echo, chi, fiber) and the gRPC interceptors
// mean the same by every option; the chi adapter takes these very options.
package tollgatehttp
