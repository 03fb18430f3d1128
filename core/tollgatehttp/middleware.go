package tollgatehttp

import (
	"net/http"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adapterkit"
)

// DefaultTenantHeader is the request header that middleware of every
// framework reads the tenant from when the application gives no tenant
// function. It suits a gateway that sets the header from the authenticated
// principal; a client can put anything in a header.
const DefaultTenantHeader = adapterkit.TenantHeader

// An Option configures Middleware. Options may come in any order, and mean
// the same in every tollgate adapter.
type Option func(*middleware)

type middleware struct {
	spec          adapterkit.Spec[*http.Request]
	deny          func(http.ResponseWriter, *http.Request, tollgate.Decision)
	missingTenant http.Handler
	h             *adapterkit.Handler[*http.Request]
}

// WithTenant sets how the middleware finds the tenant of a request (default:
// the DefaultTenantHeader header); "" means the request has none. In
// production the tenant should come from the authenticated principal, e.g.
// TenantFromContext; a bare header lets any client spend any tenant's
// budget.
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

// WithRoute sets how logs and metrics name the route: the router's pattern,
// never the raw path (default: the http.ServeMux pattern that matched, else
// ""). It is called at most once a request: for every request that is not
// skipped when the Limiter has Observers (metrics, insights), else only for
// those its log writes of, throttled, delayed or refused.
func WithRoute(fn func(*http.Request) string) Option {
	return func(m *middleware) { m.spec.Route = fn }
}

// WithBudget makes every request also draw from the named budget of its
// tenant's plan (see tollgate.Policy), such as "reports" on an export route.
// A budget that no plan has, when the Limiter's resolver knows its plans
// (tollgate.StaticResolver, tollgate.SinglePlan), is a configuration error,
// handled as a nil Limiter is.
func WithBudget(name string) Option {
	return func(m *middleware) { m.spec.Budget = name }
}

// WithMaxDelay holds a request that its tenant's policies would allow within
// d, and then serves it, instead of answering 429: a client slightly over
// its rate is slowed down rather than bounced. A request that would wait
// longer, or past its context's deadline, gets 429 at once; one whose client
// goes away while it is held gives its tokens back. A request refused only
// for want of a slot of an in-flight policy waits for one, in order of
// arrival among the requests this process holds, for up to d; if none
// comes free in time, it gets 429, having spent nothing. At most maxHeld
// requests of one tenant are held at once (0 means 16), counting those
// being decided; past that, a request is answered at once. The headers
// describe the state after the wait. Plans in shadow mode never hold a
// request.
func WithMaxDelay(d time.Duration, maxHeld int) Option {
	return func(m *middleware) { m.spec.MaxDelay, m.spec.MaxHeld = d, maxHeld }
}

// WithPartitionKey makes every RateLimit item carry the draft's partition
// key (pk): a keyed hash of the request's tenant (HMAC-SHA256 with secret,
// its first 16 bytes, as an RFC 9651 byte sequence), never the tenant ID,
// which the draft warns against sending. Without it, no pk is sent. A
// secret shorter than 16 bytes is a configuration error, handled as a nil
// Limiter is.
func WithPartitionKey(secret []byte) Option {
	return func(m *middleware) { m.spec.PartitionKeySecret = secret }
}

// WithDenyHandler replaces the answer to a denied request (default:
// WriteDenial). The rate-limit headers, Retry-After included, are set when
// fn is called. nil keeps the default.
func WithDenyHandler(fn func(w http.ResponseWriter, r *http.Request, d tollgate.Decision)) Option {
	return func(m *middleware) { m.deny = fn }
}

// WithMissingTenantHandler replaces the answer to a request without a tenant
// (default: 401 with a problem details body whose error is
// "missing_tenant"). To let
// such requests through unlimited, pass a handler that serves them, or
// exempt them with WithSkip. nil keeps the default.
func WithMissingTenantHandler(h http.Handler) Option {
	return func(m *middleware) { m.missingTenant = h }
}

// Middleware returns net/http middleware that limits each request with l:
// it sets the rate-limit headers on every limited response, answers a
// denied request with WriteDenial (429, or 503 when the store is down under
// tollgate.WithFailClosed), a request without a tenant with 401 and one
// whose tenant ID the Limiter refuses with 400, each with an RFC 9457
// problem details body, and passes allowed requests on.
//
// A request that takes a slot of an in-flight policy
// (tollgate.Policy.InFlight) gives it back when the next handler returns,
// panic or not, whether or not its client is still there.
//
// A nil l is a configuration error: the middleware logs it once, now, and
// answers every request 500 with a problem details body whose error is
// "internal_error", rather than panic or let requests through unlimited.
// Other mistakes (a budget no plan has) are treated the same way.
func Middleware(l *tollgate.Limiter, opts ...Option) func(http.Handler) http.Handler {
	m := &middleware{spec: adapterkit.Spec[*http.Request]{Limiter: l}}
	for _, o := range opts {
		if o != nil {
			o(m)
		}
	}
	var err error
	if m.h, err = adapterkit.Build(m.spec, adapterkit.Framework{}); err != nil {
		adapterkit.LogMisconfiguration(err)
		return func(http.Handler) http.Handler { return http.HandlerFunc(misconfigured) }
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m.serve(w, r, next)
		})
	}
}

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	var call adapterkit.Call // set field by field: see adapterkit.Call
	call.Context, call.Method, call.Route, call.Header = r.Context(), r.Method, r.Pattern, r.Header
	a := m.h.Decide(r, &call, adapterkit.Headers{Map: w.Header()})
	if a == nil {
		next.ServeHTTP(w, r)
		return
	}
	defer a.Release()
	switch {
	case a.Status == 0:
		next.ServeHTTP(w, r)
	case a.MissingTenant() && m.missingTenant != nil:
		m.missingTenant.ServeHTTP(w, r)
	case a.Denied() && m.deny != nil:
		m.deny(w, r, a.Decision)
	default:
		adapterkit.WriteJSON(w, a.Status, a.Body)
	}
}

// misconfigured answers a request to middleware built wrong; the mistake
// was logged when it was built.
func misconfigured(w http.ResponseWriter, _ *http.Request) {
	adapterkit.WriteJSON(w, http.StatusInternalServerError, adapterkit.InternalErrorBody)
}

// WriteDenial writes the default answer to a denied request: 429 Too Many
// Requests with an RFC 9457 problem details body (Content-Type
// application/problem+json) of the type quota-exceeded that names the
// policies that denied and the seconds to wait
// ({"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",
// "title":...,"status":429,"detail":...,"violated-policies":[...],
// "error":"rate_limited","message":...,"retry_after":N,"policy":...}), or
// 503 Service Unavailable with a problem whose error is "unavailable" when
// the store failed under fail-closed. A deny handler can fall back on it
// for the requests it does not answer itself.
func WriteDenial(w http.ResponseWriter, _ *http.Request, d tollgate.Decision) {
	status, body := adapterkit.Denial(&d)
	adapterkit.WriteJSON(w, status, body)
}
