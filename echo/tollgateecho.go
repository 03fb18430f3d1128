// Package tollgateecho limits requests to Echo applications per tenant with
// a tollgate.Limiter.
//
// Middleware and MiddlewareWithConfig return an echo.MiddlewareFunc to
// register with e.Use, on a group or on a single route. For every limited
// request it sets the rate-limit response headers and either calls the next
// handler or returns an *echo.HTTPError, so that the application's own
// HTTPErrorHandler renders the answer: 429 when a policy of the tenant's
// plan is exhausted, 503 when the store is down under
// tollgate.WithFailClosed, 401 when the request has no tenant, 400 when its
// tenant ID is too long or holds a control character, and 500 when the
// middleware or the Limiter is misconfigured (the cause is logged, not
// sent). The error's Message is the body (a json.Marshaler): RFC 9457
// problem details, which Echo's default error handler sends as it is,
// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",
// "title":...,"status":429,"detail":...,"violated-policies":[...],
// "error":"rate_limited","message":...,"retry_after":N,"policy":...} and
// the like, the body that every tollgate adapter sends. The middleware
// sets Content-Type: application/problem+json on the response before it
// returns the error, which Echo's c.JSON keeps; an error handler that
// renders the error otherwise, with c.String say, sets a Content-Type of
// its own, which Echo would keep too.
//
// A request let through that holds a slot of an in-flight policy
// (tollgate.Policy.InFlight) gives it back when the next handler returns,
// panic or not.
package tollgateecho

import (
	"net/http"
	"net/netip"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adapterkit"
	"github.com/tollgate-go/tollgate/core/tollgatehttp"
)

// Config configures the middleware. Zero fields take the value of
// DefaultConfig; Limiter is required. The fields mean what the options of
// tollgatehttp.Middleware of the same names mean, as in every tollgate
// adapter.
type Config struct {
	// Skipper exempts a request from limiting: it reaches the next handler
	// without rate-limit headers and takes no tokens.
	Skipper middleware.Skipper

	// Limiter decides on every request that is not skipped.
	Limiter *tollgate.Limiter

	// Tenant finds the tenant of a request (default: the
	// tollgatehttp.DefaultTenantHeader header); "" means it has none. It
	// should come from the
	// authenticated principal, as TenantFromContext reads it: a bare
	// header lets any client spend any tenant's budget.
	Tenant func(c echo.Context) string

	// Cost is the tokens each request takes; < 1 means 1. Register a
	// separate middleware on the routes that cost more.
	Cost int64

	// CostFunc, if set, gives the tokens each request takes instead of
	// Cost; a result < 1 counts as 1.
	CostFunc func(c echo.Context) int64

	// Route names the route in logs and metrics (default:
	// c.Path(), the route pattern Echo matched).
	Route func(c echo.Context) string

	// Budget, if set, makes every request also draw from the budget of
	// that name in its tenant's plan (see tollgate.Policy). A budget that
	// no plan has, when the Limiter's resolver knows its plans, is a
	// configuration error, as a nil Limiter is.
	Budget string

	// MaxDelay, if > 0, holds a request that its tenant's policies would
	// allow within MaxDelay and then serves it, instead of answering 429:
	// a client slightly over its rate is slowed down rather than
	// bounced, and one refused for want of an in-flight slot waits for
	// one. A request that would wait longer is answered at once. See
	// tollgatehttp.WithMaxDelay.
	MaxDelay time.Duration

	// MaxHeld bounds the requests of one tenant held at once under
	// MaxDelay (0 means 16); past it, a request is answered at once.
	MaxHeld int

	// PartitionKeySecret, if set, makes every RateLimit item carry the
	// draft's partition key (pk): a keyed hash of the tenant, never the
	// tenant ID. A secret shorter than 16 bytes is a configuration error.
	// See tollgatehttp.WithPartitionKey.
	PartitionKeySecret []byte

	// DenyHandler, if set, answers a denied request instead of the
	// default *echo.HTTPError: 429 (or 503) with the body that
	// tollgatehttp.WriteDenial writes. The rate-limit headers, Retry-After
	// included, are set when it is called. It writes a response or returns an error for the
	// HTTPErrorHandler.
	DenyHandler func(c echo.Context, d tollgate.Decision) error

	// MissingTenantHandler, if set, answers a request without a tenant
	// instead of the default *echo.HTTPError 401, whose body's error is
	// "missing_tenant". Returning next(c) lets the request
	// through unlimited.
	MissingTenantHandler func(c echo.Context, next echo.HandlerFunc) error
}

// DefaultConfig holds the values that zero Config fields take: no request
// skipped, the tenant from the X-Tenant-ID header, a cost of 1, the route
// from c.Path(), and no request held (MaxDelay 0).
var DefaultConfig = Config{
	Skipper: middleware.DefaultSkipper,
	Cost:    1,
}

// Middleware returns middleware that limits each request with l and takes
// every other setting from DefaultConfig.
func Middleware(l *tollgate.Limiter) echo.MiddlewareFunc {
	c := DefaultConfig
	c.Limiter = l
	return MiddlewareWithConfig(c)
}

// MiddlewareWithConfig returns middleware configured by cfg.
//
// Unlike Echo's own middleware it does not panic on an invalid cfg (a nil
// Limiter, a budget no plan has): it logs the mistake at once, and the
// middleware it returns answers every request with a 500 *echo.HTTPError
// whose Internal error names the mistake. Use Config.ToMiddleware to get
// the error instead.
func MiddlewareWithConfig(cfg Config) echo.MiddlewareFunc {
	mw, err := cfg.ToMiddleware()
	if err != nil {
		return misconfigured(err)
	}
	return mw
}

// ToMiddleware returns middleware configured by c, or an error if c can not
// work.
func (c Config) ToMiddleware() (echo.MiddlewareFunc, error) {
	h, err := adapterkit.Build(adapterkit.Spec[echo.Context]{
		Limiter:  c.Limiter,
		Tenant:   c.Tenant,
		Cost:     c.Cost,
		CostFunc: c.CostFunc,
		Skip:     c.Skipper,
		Route:    c.Route,
		Budget:   c.Budget,
		MaxDelay: c.MaxDelay,
		MaxHeld:  c.MaxHeld,

		PartitionKeySecret: c.PartitionKeySecret,
	}, adapterkit.Framework{})
	if err != nil {
		return nil, err
	}
	m := &limiter{cfg: c, h: h}
	return m.wrap, nil
}

type limiter struct {
	cfg Config
	h   *adapterkit.Handler[echo.Context]
}

func (m *limiter) wrap(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		return m.serve(c, next)
	}
}

func (m *limiter) serve(c echo.Context, next echo.HandlerFunc) error {
	// The headers are set before any answer, so that they reach the
	// client whether the handler or the error handler writes the
	// response.
	r := c.Request()
	var call adapterkit.Call // set field by field: see adapterkit.Call
	call.Context, call.Method, call.Route, call.Header = r.Context(), r.Method, c.Path(), r.Header
	a := m.h.Decide(c, &call, adapterkit.Headers{Map: c.Response().Header()})
	if a == nil {
		return next(c)
	}
	defer a.Release()
	switch {
	case a.Status == 0:
		return next(c)
	case a.Denied() && m.cfg.DenyHandler != nil:
		return m.cfg.DenyHandler(c, a.Decision)
	case a.MissingTenant() && m.cfg.MissingTenantHandler != nil:
		return m.cfg.MissingTenantHandler(c, next)
	}
	// The error handler renders the body, with the media type of problem
	// details, which c.JSON keeps; the header keeps browsers from sniffing
	// it as anything but that, as the other adapters' answers do.
	h := c.Response().Header()
	h["Content-Type"], h["X-Content-Type-Options"] = problemJSON, nosniff
	return echo.NewHTTPError(a.Status, a.Body)
}

var (
	nosniff     = []string{"nosniff"}
	problemJSON = []string{adapterkit.ProblemContentType}
)

// TenantFromHeader returns a tenant function for Config.Tenant that reads
// the request header name. Use it only behind a gateway that sets the header
// from the authenticated principal.
func TenantFromHeader(name string) func(echo.Context) string {
	key := http.CanonicalHeaderKey(name)
	return func(c echo.Context) string { return adapterkit.HeaderValue(c.Request().Header, key) }
}

// TenantFromContext returns a tenant function for Config.Tenant that reads
// the value the application's authentication middleware stored with
// c.Set(key, value). The value must be a string or a fmt.Stringer; anything
// else, or no value, is a missing tenant. Register the authentication
// middleware before the limiter.
func TenantFromContext(key string) func(echo.Context) string {
	return func(c echo.Context) string {
		return adapterkit.TenantString(c.Get(key))
	}
}

// TenantFromClientIP returns a tenant function for Config.Tenant that keys
// each request by its client address (an IPv6 client by its /64). The address is the TCP peer's unless the peer is
// one of trustedProxies: only then are X-Forwarded-For and X-Real-IP
// believed, read from the right (see tollgatehttp.ClientIP). It ignores the
// Echo instance's IPExtractor.
func TenantFromClientIP(trustedProxies ...netip.Prefix) func(echo.Context) string {
	tenant := tollgatehttp.TenantFromClientIP(trustedProxies...)
	return func(c echo.Context) string { return tenant(c.Request()) }
}

// misconfigured logs err now and returns middleware that fails every
// request with 500, so that a configuration mistake is loud at start-up and
// in the first test without crashing the process.
func misconfigured(err error) echo.MiddlewareFunc {
	adapterkit.LogMisconfiguration(err)
	return func(echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			// Internal reaches logs and error handlers; the default
			// error handler sends only Message.
			c.Response().Header()["Content-Type"] = problemJSON
			return &echo.HTTPError{Code: http.StatusInternalServerError, Message: adapterkit.InternalErrorBody, Internal: err}
		}
	}
}
