// Package tollgategrpc limits the calls to a gRPC server per tenant with a
// tollgate.Limiter.
//
// UnaryServerInterceptor and StreamServerInterceptor return interceptors to
// install with grpc.ChainUnaryInterceptor and grpc.ChainStreamInterceptor,
// after the application's authentication:
//
//	limit := []tollgategrpc.Option{
//		tollgategrpc.WithTenant(tollgategrpc.TenantFromContext(tenantKey{})),
//		tollgategrpc.WithMethodCosts(map[string]int64{"/reports.v1.Reports/Create": 10}),
//	}
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(authUnary, tollgategrpc.UnaryServerInterceptor(limiter, limit...)),
//		grpc.ChainStreamInterceptor(authStream, tollgategrpc.StreamServerInterceptor(limiter, limit...)),
//	)
//
// A unary call is limited before its handler runs. A stream is limited once,
// when it opens, at the cost of its method: the messages sent on it later
// take nothing, so a long-lived stream should cost what it is worth. A call
// that takes a slot of an in-flight policy (tollgate.Policy.InFlight)
// holds it until its handler returns (a stream: until it ends), whether it
// returns, panics or is cancelled; a panic goes on to the interceptor that
// recovers from it, which gRPC does not install by default.
//
// The route of a call, in logs and metrics, is its full method name
// ("/reports.v1.Reports/Create"); the default tenant is the incoming
// metadata key x-tenant-id (tollgatehttp.DefaultTenantHeader, lower-cased,
// as gRPC keys are). The options mean what the options of
// tollgatehttp.Middleware of the same names mean, as in every tollgate
// adapter, and may come in any order.
//
// # Answers
//
// Every limited call, allowed or refused, carries the rate-limit fields of
// the HTTP adapters as response header metadata, under lower-case keys and
// with the same values: x-ratelimit-limit, x-ratelimit-remaining,
// x-ratelimit-reset, ratelimit-policy, ratelimit, and retry-after on a
// denial. A refused call ends with a status instead of reaching its
// handler:
//
//   - codes.ResourceExhausted when a policy of the tenant's plan is
//     exhausted, with a google.rpc.RetryInfo detail whose retry delay is
//     retry-after's whole seconds, a google.rpc.QuotaFailure detail with a
//     violation for each policy that denied (its name as the quota_id, its
//     unit, "requests" or "concurrent-requests", as the quota_metric, its
//     burst, quota or slots as the quota_value, and the subject "tenant":
//     the tenant ID is not sent), and a message naming the policy;
//   - codes.Unavailable when the store is down under
//     tollgate.WithFailClosed;
//   - codes.Unauthenticated when the call has no tenant;
//   - codes.InvalidArgument when its tenant ID is longer than 256 bytes or
//     holds a control character (tollgate.ErrInvalidTenant);
//   - codes.Internal when the interceptor or the Limiter is misconfigured
//     (a nil Limiter, a budget no plan has, a cost above a plan's burst):
//     the cause is logged, never sent.
//
// A call let through because the store failed (fail-open, the default)
// carries no rate-limit metadata, as any figure would be made up, and
// neither does a call of a plan in shadow mode unless
// tollgate.WithShadowHeaders asks for it.
//
// # Holding calls
//
// With WithMaxDelay, a call a little over its tenant's rate is held before
// its handler runs, on the goroutine gRPC gave it, until its tokens are
// due, and then served, as the HTTP adapters hold requests: callers that
// would retry a ResourceExhausted anyway are paced instead. A call is
// never held past its own deadline (it is refused at once when its turn
// comes later), and a call cancelled while held gives its tokens back.
package tollgategrpc
