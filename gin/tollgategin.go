// Package tollgategin limits requests to gin applications per tenant with a
// tollgate.Limiter.
//
// New returns a gin.HandlerFunc to register on an engine, a group or a single
// route. For every limited request it sets the rate-limit response headers
// and either lets the request through or aborts the chain with the
// Limiter's answer as JSON: 429 when the tenant's bucket is empty, 503 when
// the store is down under tollgate.FailClosed, 401 when the request has no
// tenant, and 500 when the Limiter is misconfigured (the cause is logged, not
// sent).
package tollgategin

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/gin-gonic/gin"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// DefaultTenantHeader is the request header New reads the tenant from unless
// WithTenant says otherwise.
const DefaultTenantHeader = "X-Tenant-ID"

// An Option configures the handler New returns.
type Option func(*limiter)

type limiter struct {
	l             *tollgate.Limiter
	tenant        func(*gin.Context) string
	cost          int64
	costFunc      func(*gin.Context) int64
	skip          func(*gin.Context) bool
	deny          func(*gin.Context, tollgate.Decision)
	missingTenant gin.HandlerFunc
}

// WithTenant sets how the handler finds the tenant of a request (default
// TenantFromHeader(DefaultTenantHeader)); nil keeps the default. The tenant
// should come from the authenticated principal, as TenantFromContext reads
// it: a bare header lets any client spend any tenant's budget.
func WithTenant(fn func(c *gin.Context) string) Option {
	return func(m *limiter) {
		if fn != nil {
			m.tenant = fn
		}
	}
}

// WithCost sets the tokens each request takes (default 1; n < 1 means 1).
// Register a separate handler on the routes that cost more.
func WithCost(n int64) Option {
	return func(m *limiter) { m.cost, m.costFunc = max(n, 1), nil }
}

// WithCostFunc sets a function that gives the tokens each request takes; a
// result < 1 counts as 1. It overrides WithCost.
func WithCostFunc(fn func(c *gin.Context) int64) Option {
	return func(m *limiter) { m.costFunc = fn }
}

// WithSkip sets a function that exempts a request from limiting: it goes on
// down the chain without rate-limit headers and takes no tokens.
func WithSkip(fn func(c *gin.Context) bool) Option {
	return func(m *limiter) { m.skip = fn }
}

// WithDenyHandler replaces the answer to a denied request (default
// c.AbortWithStatusJSON with the Decision's DenialStatus and DenialBody).
// When fn is called the chain is already aborted and the rate-limit headers,
// Retry-After included, are set; fn writes the response.
func WithDenyHandler(fn func(c *gin.Context, d tollgate.Decision)) Option {
	return func(m *limiter) { m.deny = fn }
}

// WithMissingTenantHandler replaces the answer to a request without a tenant
// (default 401 with tollgate.MissingTenantBody). fn either answers and
// aborts the chain, or returns without aborting, which lets the request
// through unlimited.
func WithMissingTenantHandler(fn gin.HandlerFunc) Option {
	return func(m *limiter) { m.missingTenant = fn }
}

// TenantFromHeader returns a tenant function for WithTenant that reads the
// request header name. Use it only behind a gateway that sets the header
// from the authenticated principal.
func TenantFromHeader(name string) func(*gin.Context) string {
	key := http.CanonicalHeaderKey(name)
	return func(c *gin.Context) string {
		// Indexing the map with the canonical key saves the
		// canonicalisation that Header.Get repeats on every call.
		if v := c.Request.Header[key]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
}

// TenantFromContext returns a tenant function for WithTenant that reads the
// value the application's authentication middleware stored with
// c.Set(key, value). The value must be a string or a fmt.Stringer; anything
// else, or no value, is a missing tenant. Register the authentication
// middleware before the limiter.
func TenantFromContext(key any) func(*gin.Context) string {
	return func(c *gin.Context) string {
		v, _ := c.Get(key)
		return tollgate.TenantString(v)
	}
}

// TenantFromClientIP returns a tenant function for WithTenant that keys each
// request by its client address, as c.ClientIP finds it, grouped by
// tollgate.IPKey (an IPv6 client by its /64).
//
// c.ClientIP believes X-Forwarded-For only from the proxies the engine
// trusts, and a gin engine trusts every address until told otherwise, which
// would let any client choose its own bucket. Call
// engine.SetTrustedProxies with the addresses of your proxies, or nil when
// clients connect directly.
func TenantFromClientIP() func(*gin.Context) string {
	return func(c *gin.Context) string {
		return tollgate.IPKeyString(c.ClientIP())
	}
}

// New returns gin middleware that limits each request with l. It sets the
// rate-limit headers on every limited response, aborts a denied request with
// 429 (or 503 under tollgate.FailClosed while the store is down) and a JSON
// body naming the retry time, and lets allowed requests go on down the chain.
// The Limiter's store is called with c.Request.Context().
//
// A nil l is a configuration error: New does not panic, but logs the error
// and returns a handler that answers every request with 500.
func New(l *tollgate.Limiter, opts ...Option) gin.HandlerFunc {
	if l == nil {
		return misconfigured(errors.New("tollgategin: New: the Limiter is nil"))
	}
	m := &limiter{l: l, tenant: TenantFromHeader(DefaultTenantHeader), cost: 1}
	for _, o := range opts {
		o(m)
	}
	return m.handle
}

func (m *limiter) handle(c *gin.Context) {
	if m.skip != nil && m.skip(c) {
		return
	}
	cost := m.cost
	if m.costFunc != nil {
		cost = max(m.costFunc(c), 1)
	}
	r := c.Request
	a := m.l.Answer(r.Context(), tollgate.Request{
		Tenant: m.tenant(c),
		Cost:   cost,
		Method: r.Method,
		Route:  c.FullPath(),
	})
	// Straight into the header map: the names are canonical already, and
	// one backing array serves all the values, where c.Header would
	// canonicalise and allocate once per header.
	a.Decision.WriteHeaders(c.Writer.Header())
	if a.Status == 0 {
		return
	}
	switch {
	case a.Denied() && m.deny != nil:
		c.Abort()
		m.deny(c, a.Decision)
		return
	case a.MissingTenant() && m.missingTenant != nil:
		m.missingTenant(c)
		return
	}
	c.Writer.Header()["X-Content-Type-Options"] = nosniff
	c.AbortWithStatusJSON(a.Status, a.Body)
}

var nosniff = []string{"nosniff"}

// misconfigured logs err now, at start-up, and returns a handler that
// answers every request with 500, so that a configuration mistake is loud in
// the first test or deployment without crashing the process.
func misconfigured(err error) gin.HandlerFunc {
	slog.Default().Error("rate limiter misconfigured: every request will be refused", slog.String("error", err.Error()))
	return func(c *gin.Context) {
		// c.Errors reaches gin's logger, never the client.
		_ = c.Error(err)
		c.AbortWithStatusJSON(http.StatusInternalServerError, tollgate.InternalErrorBody)
	}
}
