// Package adapterkit is what tollgate's middleware shares: the net/http
// middleware of package tollgatehttp, the framework adapters (gin, echo,
// chi, fiber) and the gRPC interceptors. Applications never import it;
// they use tollgatehttp or their framework's adapter.
//
// An adapter translates its framework's idiom (gin options, an Echo or
// Fiber Config, interceptor options) into a Spec, which means the same in
// every adapter, and gets a Handler from Build. On each request it reads
// what the kit needs of its framework's context into a Call, lets the
// Handler decide and put the rate-limit headers on the response
// (Handler.Decide), and either passes the request on or writes the Answer
// in its framework's idiom: its Body as problem details JSON, with its
// Status. A request enters the kit once, in Decide, and leaves it with its
// headers written; the adapter calls Answer.Release when the request has
// ended (after the handler, deferred), which gives back the slot of an
// in-flight policy that the request holds.
//
// The kit also owns what every adapter answers alike: the response bodies
// and their JSON (Body: RFC 9457 problem details), the header values (RFC
// 9651 structured fields as draft-ietf-httpapi-ratelimit-headers defines
// them), the client address behind trusted proxies (ForwardedClientIP,
// IPKey), and the log line of a middleware built wrong
// (LogMisconfiguration).
package adapterkit
