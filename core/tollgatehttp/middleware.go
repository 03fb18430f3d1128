package tollgatehttp

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// An Option configures Middleware. Options may come in any order.
type Option func(*middleware)

type middleware struct {
	spec          Spec[*http.Request]
	deny          func(http.ResponseWriter, *http.Request, tollgate.Decision)
	missingTenant http.Handler
}

// WithTenant sets how the middleware finds the tenant of a request (default:
// the DefaultTenantHeader header). In production the tenant should come from
// the authenticated principal, e.g. TenantFromContext; a bare header lets
// any client spend any tenant's budget. See Spec.Tenant.
func WithTenant(fn func(*http.Request) string) Option {
	return func(m *middleware) { m.spec.Tenant = fn }
}

// WithCost sets the tokens each request takes (default 1; n < 1 means 1).
// WithCostFunc, if also given, wins.
func WithCost(n int64) Option {
	return func(m *middleware) { m.spec.Cost = n }
}

// WithCostFunc sets a function that gives the tokens each request takes; a
// result < 1 counts as 1. It wins over WithCost.
func WithCostFunc(fn func(*http.Request) int64) Option {
	return func(m *middleware) { m.spec.CostFunc = fn }
}

// WithSkip sets a function that exempts a request from limiting: it passes
// through without headers and takes nothing.
func WithSkip(fn func(*http.Request) bool) Option {
	return func(m *middleware) { m.spec.Skip = fn }
}

// WithRoute sets how events, logs and metrics name the route (default: the
// http.ServeMux pattern that matched, else "").
func WithRoute(fn func(*http.Request) string) Option {
	return func(m *middleware) { m.spec.Route = fn }
}

// WithBudget makes every request also draw from the named budget of its
// tenant's plan (see tollgate.Policy), such as "reports" on an export route.
func WithBudget(name string) Option {
	return func(m *middleware) { m.spec.Budget = name }
}

// WithMaxDelay holds a request that the policies would allow within d and
// then serves it, instead of answering 429 (see Spec.MaxDelay); at most
// maxHeld requests of one tenant are held at once (0 means
// DefaultMaxHeld).
func WithMaxDelay(d time.Duration, maxHeld int) Option {
	return func(m *middleware) { m.spec.MaxDelay, m.spec.MaxHeld = d, maxHeld }
}

// WithDenyHandler replaces the answer to a denied request (default: the
// DenialStatus and DenialBody as JSON). The rate-limit headers, Retry-After
// included, are already set when fn is called. nil keeps the default.
func WithDenyHandler(fn func(w http.ResponseWriter, r *http.Request, d tollgate.Decision)) Option {
	return func(m *middleware) { m.deny = fn }
}

// WithMissingTenantHandler replaces the answer to a request without a tenant
// (default: 401 with MissingTenantBody). To let such requests through, pass
// a handler that serves them, or exempt them with WithSkip. nil keeps the
// default.
func WithMissingTenantHandler(h http.Handler) Option {
	return func(m *middleware) { m.missingTenant = h }
}

// NetHTTP describes net/http requests to Build.
var NetHTTP = Framework[*http.Request]{
	Context: (*http.Request).Context,
	Method:  func(r *http.Request) string { return r.Method },
	Header:  func(r *http.Request, name string) string { return HeaderValue(r.Header, name) },
	Route:   func(r *http.Request) string { return r.Pattern },
}

// Middleware returns net/http middleware that limits each request with l:
// it sets the rate-limit headers on every limited response, answers a
// denied request with 429 (or 503 under FailClosed while the store is down)
// and a JSON body, and passes allowed requests on.
//
// A nil l is a configuration error: the middleware logs it once, now, and
// answers every request with 500 and InternalErrorBody, rather than panic or
// let requests through unlimited. Other mistakes (an invalid budget name)
// are treated the same way.
func Middleware(l *tollgate.Limiter, opts ...Option) func(http.Handler) http.Handler {
	m := &middleware{spec: Spec[*http.Request]{Limiter: l}}
	for _, o := range opts {
		if o != nil {
			o(m)
		}
	}
	h, err := Build(m.spec, NetHTTP)
	if err != nil {
		return func(http.Handler) http.Handler { return Misconfigured(err) }
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m.serve(h, w, r, next)
		})
	}
}

func (m *middleware) serve(h *Handler[*http.Request], w http.ResponseWriter, r *http.Request, next http.Handler) {
	var a Answer
	if !h.Decide(r, &a) {
		next.ServeHTTP(w, r)
		return
	}
	WriteHeaders(w.Header(), &a.Decision)
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

// Misconfigured logs err at level Error, now, and returns a handler that
// answers every request with 500 and InternalErrorBody: a configuration
// mistake is loud at start-up and in the first test, without crashing the
// process or letting requests through unlimited. The adapters do the same
// in their frameworks' idioms.
func Misconfigured(err error) http.Handler {
	LogMisconfiguration(err)
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		WriteJSON(w, http.StatusInternalServerError, InternalErrorBody)
	})
}

// LogMisconfiguration logs a middleware configuration error at level Error
// on slog's default logger, as every adapter does when it is built wrong.
func LogMisconfiguration(err error) {
	slog.Default().LogAttrs(context.Background(), slog.LevelError,
		"rate limiter misconfigured: every request will be refused", slog.String("error", err.Error()))
}
