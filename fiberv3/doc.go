// Package tollgatefiberv3 limits requests to a Fiber v3 app per tenant with a
// tollgate.Limiter.
//
// New returns a fiber.Handler configured, in Fiber's manner, by a Config:
//
//	app.Use(tollgatefiberv3.New(tollgatefiberv3.Config{Limiter: l}))
//	app.Post("/reports", tollgatefiberv3.New(tollgatefiberv3.Config{Limiter: l, Cost: 10}), createReport)
//
// It sets the rate-limit headers on every limited response, straight into
// fasthttp's response header, and either passes the request on with c.Next
// or answers it with c.JSON, an RFC 9457 problem details body
// (application/problem+json): 429 when a policy of the tenant's plan is
// exhausted, 503 when the store is down under tollgate.WithFailClosed, 401
// when the request has no tenant, 400 when its tenant ID is too long or
// holds a control character, and 500 when the middleware or the Limiter
// is misconfigured (the cause is logged, not sent). The fields of Config
// mean what the options of tollgatehttp.Middleware of the same names mean,
// as in every tollgate adapter (Next is WithSkip, LimitReached
// WithDenyHandler).
//
// A request that holds a slot of an in-flight policy (tollgate.Policy.InFlight)
// gives it back when c.Next returns, panic or not: a panic must still be
// recovered, by Fiber's recover middleware registered before this one.
//
// Fiber reuses the memory behind the strings it hands out once a request
// ends. The middleware copies the tenant ID before the Limiter sees it, so
// the strings in a Decision or a store key stay intact; Tenant functions
// need not copy. The method and route strings Fiber v3
// returns belong to the app and outlive the request.
package tollgatefiberv3
