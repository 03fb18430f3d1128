// Package tollgateecho limits requests to Echo applications per tenant with
// a tollgate.Limiter.
//
// Middleware and MiddlewareWithConfig return an echo.MiddlewareFunc to
// register with e.Use, on a group or on a single route. For every limited
// request it sets the rate-limit response headers and either calls the next
// handler or returns an *echo.HTTPError whose Message is a
// tollgate.ResponseBody, so that the application's own HTTPErrorHandler
// renders the answer: 429 when the tenant's bucket is empty, 503 when the
// store is down under tollgate.FailClosed, 401 when the request has no
// tenant, and 500 when the Limiter is misconfigured (the cause is logged,
// not sent). Echo's default error handler renders the body as JSON.
package tollgateecho

import (
	"errors"
	"net/http"
	"sync"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// DefaultTenantHeader is the request header the middleware reads the tenant
// from unless Config.Tenant says otherwise.
const DefaultTenantHeader = "X-Tenant-ID"

// Config configures the middleware. Zero fields take the value of
// DefaultConfig; Limiter is required.
type Config struct {
	// Skipper exempts a request from limiting: it reaches the next handler
	// without rate-limit headers and takes no tokens.
	Skipper middleware.Skipper

	// Limiter decides on every request that is not skipped.
	Limiter *tollgate.Limiter

	// Tenant finds the tenant of a request. It should come from the
	// authenticated principal, as TenantFromContext reads it: a bare
	// header lets any client spend any tenant's budget.
	Tenant func(c echo.Context) string

	// Cost is the tokens each request takes; < 1 means 1. Register a
	// separate middleware on the routes that cost more.
	Cost int64

	// CostFunc, if set, gives the tokens each request takes instead of
	// Cost; a result < 1 counts as 1.
	CostFunc func(c echo.Context) int64

	// DenyHandler, if set, answers a denied request instead of the
	// default *echo.HTTPError carrying d.DenialStatus() and
	// d.DenialBody(). The rate-limit headers, Retry-After included, are
	// set when it is called. It writes a response or returns an error for
	// the HTTPErrorHandler.
	DenyHandler func(c echo.Context, d tollgate.Decision) error

	// MissingTenantHandler, if set, answers a request without a tenant
	// instead of the default *echo.HTTPError 401 carrying
	// tollgate.MissingTenantBody. Returning next(c) lets the request
	// through unlimited.
	MissingTenantHandler func(c echo.Context, next echo.HandlerFunc) error
}

// DefaultConfig holds the values that zero Config fields take: no request
// skipped, the tenant from the X-Tenant-ID header, a cost of 1.
var DefaultConfig = Config{
	Skipper: middleware.DefaultSkipper,
	Tenant:  TenantFromHeader(DefaultTenantHeader),
	Cost:    1,
}

// Middleware returns middleware that limits each request with l, configured
// otherwise by DefaultConfig.
func Middleware(l *tollgate.Limiter) echo.MiddlewareFunc {
	c := DefaultConfig
	c.Limiter = l
	return MiddlewareWithConfig(c)
}

// MiddlewareWithConfig returns middleware configured by cfg.
//
// Unlike Echo's own middleware it does not panic on an invalid cfg (a nil
// Limiter): the middleware it returns then answers every request with a
// 500 *echo.HTTPError, whose Internal error names the mistake, and logs the
// mistake once to the Echo logger. Use Config.ToMiddleware to get the error
// at start-up instead.
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
	if c.Limiter == nil {
		return nil, errors.New("tollgateecho: Config.Limiter is nil")
	}
	if c.Skipper == nil {
		c.Skipper = DefaultConfig.Skipper
	}
	if c.Tenant == nil {
		c.Tenant = DefaultConfig.Tenant
	}
	c.Cost = max(c.Cost, 1)
	m := &limiter{cfg: c}
	return m.wrap, nil
}

type limiter struct {
	cfg Config
}

func (m *limiter) wrap(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		return m.serve(c, next)
	}
}

func (m *limiter) serve(c echo.Context, next echo.HandlerFunc) error {
	cfg := &m.cfg
	if cfg.Skipper(c) {
		return next(c)
	}
	cost := cfg.Cost
	if cfg.CostFunc != nil {
		cost = max(cfg.CostFunc(c), 1)
	}
	r := c.Request()
	a := cfg.Limiter.Answer(r.Context(), tollgate.Request{
		Tenant: cfg.Tenant(c),
		Cost:   cost,
		Method: r.Method,
		Route:  c.Path(),
	})
	// Set before any answer, so that they reach the client whether the
	// handler or the error handler writes the response.
	a.Decision.WriteHeaders(c.Response().Header())
	if a.Status == 0 {
		return next(c)
	}
	switch {
	case a.Denied() && cfg.DenyHandler != nil:
		return cfg.DenyHandler(c, a.Decision)
	case a.MissingTenant() && cfg.MissingTenantHandler != nil:
		return cfg.MissingTenantHandler(c, next)
	}
	// The error handler renders the body; the header keeps browsers from
	// sniffing it as anything but JSON, as the other adapters' answers do.
	c.Response().Header()["X-Content-Type-Options"] = nosniff
	return echo.NewHTTPError(a.Status, a.Body)
}

var nosniff = []string{"nosniff"}

// TenantFromHeader returns a tenant function for Config.Tenant that reads
// the request header name. Use it only behind a gateway that sets the header
// from the authenticated principal.
func TenantFromHeader(name string) func(echo.Context) string {
	key := http.CanonicalHeaderKey(name)
	return func(c echo.Context) string {
		// Indexing the map with the canonical key saves the
		// canonicalisation that Header.Get repeats on every call.
		if v := c.Request().Header[key]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
}

// TenantFromContext returns a tenant function for Config.Tenant that reads
// the value the application's authentication middleware stored with
// c.Set(key, value). The value must be a string or a fmt.Stringer; anything
// else, or no value, is a missing tenant. Register the authentication
// middleware before the limiter.
func TenantFromContext(key string) func(echo.Context) string {
	return func(c echo.Context) string {
		return tollgate.TenantString(c.Get(key))
	}
}

// TenantFromClientIP returns a tenant function for Config.Tenant that keys
// each request by its client address, grouped by tollgate.IPKey (an IPv6
// client by its /64).
//
// The address is c.RealIP() when the Echo instance has an IPExtractor,
// which decides which proxies to believe (echo.ExtractIPFromXFFHeader with
// the trust options that fit your network). Without one, it is the direct
// peer: c.RealIP would then believe an X-Forwarded-For header from anyone,
// letting any client choose its own bucket.
func TenantFromClientIP() func(echo.Context) string {
	direct := echo.ExtractIPDirect()
	return func(c echo.Context) string {
		if e := c.Echo(); e != nil && e.IPExtractor != nil {
			return tollgate.IPKeyString(c.RealIP())
		}
		return tollgate.IPKeyString(direct(c.Request()))
	}
}

// misconfigured returns middleware that fails every request with 500 and
// logs err on the first one, so that a configuration mistake is loud in the
// first test or deployment without crashing the process.
func misconfigured(err error) echo.MiddlewareFunc {
	var once sync.Once
	return func(echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			once.Do(func() { c.Logger().Errorf("rate limiter misconfigured: every request is refused: %v", err) })
			// Internal reaches logs and error handlers; the default
			// error handler sends only Message.
			return &echo.HTTPError{Code: http.StatusInternalServerError, Message: tollgate.InternalErrorBody, Internal: err}
		}
	}
}
