package tollgate

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
)

// An Answer is what middleware does with one request: pass it on (Status 0)
// or answer it with Status and Body. Decision is the Limiter's decision; its
// headers belong on the response either way.
type Answer struct {
	Decision Decision
	Status   int
	Body     ResponseBody
}

// Denied reports whether a answers a denied request: 429 with the bucket
// empty, or 503 with the store down under FailClosed. Adapters give these to
// the application's replacement for the denial answer.
func (a *Answer) Denied() bool {
	return a.Status != 0 && (a.Body.Error == CodeRateLimited || a.Body.Error == CodeUnavailable)
}

// MissingTenant reports whether a answers a request without a tenant.
func (a *Answer) MissingTenant() bool {
	return a.Body.Error == CodeMissingTenant
}

// Answer decides on req for middleware: 401 with MissingTenantBody when
// req.Tenant is empty, the Decision's denial status and body when it is
// denied, and 500 with InternalErrorBody when Take returns an error, which
// Answer logs. The framework adapters are built on it.
func (l *Limiter) Answer(ctx context.Context, req Request) (a Answer) {
	if req.Tenant == "" {
		return Answer{Status: http.StatusUnauthorized, Body: MissingTenantBody}
	}
	if err := l.decide(ctx, &req, &a.Decision); err != nil {
		l.logMisconfiguration(ctx, &req, err)
		a.Status, a.Body = http.StatusInternalServerError, InternalErrorBody
		return a
	}
	if !a.Decision.Allowed {
		a.Status, a.Body = a.Decision.DenialStatus(), a.Decision.DenialBody()
	}
	return a
}

func (l *Limiter) logMisconfiguration(ctx context.Context, req *Request, err error) {
	if l.logger == nil {
		return
	}
	if log, suppressed := l.failureLog.admit("misconfiguration", l.now()); log {
		l.logger.LogAttrs(ctx, slog.LevelError, "rate limiter misconfigured: request refused",
			slog.String("tenant_id", req.Tenant),
			slog.Int64("cost", req.Cost),
			slog.String("method", req.Method),
			slog.String("route", req.route()),
			slog.String("error", err.Error()),
			slog.Int64("suppressed", suppressed),
		)
	}
}

// A MiddlewareOption configures Middleware.
type MiddlewareOption func(*middleware)

type middleware struct {
	limiter       *Limiter
	tenant        func(*http.Request) string
	cost          func(*http.Request) int64
	fixedCost     int64
	skip          func(*http.Request) bool
	route         func(*http.Request) string
	deny          func(http.ResponseWriter, *http.Request, Decision)
	missingTenant http.Handler
}

// WithTenant sets how the middleware finds the tenant of a request
// (default TenantFromHeader("X-Tenant-ID")). In production the tenant should
// come from the authenticated principal, e.g. TenantFromContext; a bare
// header lets any client spend any tenant's budget.
func WithTenant(fn func(*http.Request) string) MiddlewareOption {
	return func(m *middleware) { m.tenant = fn }
}

// WithCost sets the tokens each request takes (default 1; n < 1 means 1).
func WithCost(n int64) MiddlewareOption {
	return func(m *middleware) { m.fixedCost, m.cost = max(n, 1), nil }
}

// WithCostFunc sets a function that gives the tokens each request takes;
// a result < 1 counts as 1.
func WithCostFunc(fn func(*http.Request) int64) MiddlewareOption {
	return func(m *middleware) { m.cost = fn }
}

// WithSkip sets a function that exempts a request from limiting: it passes
// through without headers.
func WithSkip(fn func(*http.Request) bool) MiddlewareOption {
	return func(m *middleware) { m.skip = fn }
}

// WithRoute sets how throttle events name the route (default the
// http.ServeMux pattern that matched, else the URL path).
func WithRoute(fn func(*http.Request) string) MiddlewareOption {
	return func(m *middleware) { m.route = fn }
}

// WithDenyHandler replaces the answer to a denied request (default: the
// Decision's DenialStatus and DenialBody as JSON). The rate-limit headers,
// Retry-After included, are already set when fn is called.
func WithDenyHandler(fn func(w http.ResponseWriter, r *http.Request, d Decision)) MiddlewareOption {
	return func(m *middleware) { m.deny = fn }
}

// WithMissingTenantHandler replaces the answer to a request without a tenant
// (default: 401 with MissingTenantBody). To let such requests through, pass
// a handler that serves them, or exempt them with WithSkip.
func WithMissingTenantHandler(h http.Handler) MiddlewareOption {
	return func(m *middleware) { m.missingTenant = h }
}

// Middleware returns net/http middleware that limits each request with l:
// it sets the rate-limit headers on every limited response, answers a denied
// request with 429 (or 503 under FailClosed when the store is down) and a
// JSON body, and passes allowed requests on.
//
// A nil l is a configuration error: the middleware answers every request
// with 500 and InternalErrorBody, and logs the mistake once, rather than
// panic or let requests through unlimited.
func Middleware(l *Limiter, opts ...MiddlewareOption) func(http.Handler) http.Handler {
	if l == nil {
		return misconfigured("tollgate: Middleware: the Limiter is nil")
	}
	m := &middleware{limiter: l, tenant: TenantFromHeader("X-Tenant-ID"), fixedCost: 1, route: patternOrPath}
	for _, o := range opts {
		o(m)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m.serve(w, r, next)
		})
	}
}

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if m.skip != nil && m.skip(r) {
		next.ServeHTTP(w, r)
		return
	}
	cost := m.fixedCost
	if m.cost != nil {
		cost = max(m.cost(r), 1)
	}
	a := m.limiter.Answer(r.Context(), Request{Tenant: m.tenant(r), Cost: cost, Method: r.Method, routeOf: m.route, httpReq: r})
	a.Decision.WriteHeaders(w.Header())
	switch {
	case a.Status == 0:
		next.ServeHTTP(w, r)
	case a.MissingTenant() && m.missingTenant != nil:
		m.missingTenant.ServeHTTP(w, r)
	case a.Denied() && m.deny != nil:
		m.deny(w, r, a.Decision)
	default:
		WriteJSON(w, a.Status, a.Body)
	}
}

func patternOrPath(r *http.Request) string {
	if r.Pattern != "" {
		return r.Pattern
	}
	return r.URL.Path
}

func misconfigured(mistake string) func(http.Handler) http.Handler {
	var once sync.Once
	return func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			once.Do(func() {
				slog.ErrorContext(r.Context(), "rate limiter misconfigured: every request is refused", "error", mistake)
			})
			WriteJSON(w, http.StatusInternalServerError, InternalErrorBody)
		})
	}
}
