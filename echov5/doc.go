// Package tollgateechov5 limits requests to Echo v5 applications per tenant
// with a tollgate.Limiter.
//
// Middleware, MiddlewareWithConfig and Config.ToMiddleware return an
// echo.MiddlewareFunc to register with e.Use, on a group or on a single
// route. For every limited request it sets the rate-limit response headers
// and either calls the next handler or returns an *Error, so that the
// application's own HTTPErrorHandler renders the answer: 429 when a policy
// of the tenant's plan is exhausted, 503 when the store is down under
// tollgate.WithFailClosed, 401 when the request has no tenant, 400 when its
// tenant ID is too long or holds a control character, and 500 when the
// middleware or the Limiter is misconfigured (the cause is logged, not
// sent).
//
// An *Error has the status code (echo.HTTPStatusCoder) and renders itself
// as JSON (json.Marshaler), so echo.DefaultHTTPErrorHandler writes the
// body every tollgate adapter sends: RFC 9457 problem details with the
// violated policies, under the Content-Type application/problem+json that
// the middleware sets before it returns the error (c.JSON keeps it; an
// error handler that renders the error otherwise, with c.String say, sets
// a Content-Type of its own, which Echo would keep too). With
// echo.ProblemDetailsHTTPErrorHandler the answer is an echo.ProblemError
// (echo.ProblemErrorer): the same type, title, status and detail, without
// the extension members. The fields of Config mean what the options of
// tollgatehttp.Middleware of the same names mean, as in every tollgate
// adapter (Skipper is WithSkip).
//
// A request let through that holds a slot of an in-flight policy
// (tollgate.Policy.InFlight) gives it back when the next handler returns,
// panic or not.
package tollgateechov5
