// Package tollgategin limits requests to gin applications per tenant with a
// tollgate.Limiter.
//
// New returns a gin.HandlerFunc to register on an engine, a group or a single
// route. For every limited request it sets the rate-limit response headers
// and either lets the request through or aborts the chain with the
// Limiter's answer as RFC 9457 problem details (application/problem+json):
// 429 when a policy of the tenant's plan is exhausted, 503 when the store
// is down under tollgate.WithFailClosed, 401 when the request has no
// tenant, 400 when its tenant ID is too long or holds a control character,
// and 500 when the middleware or the Limiter is misconfigured (the cause is
// logged, not sent).
//
// A request let through runs the rest of the chain inside the handler
// (c.Next), so that a slot of an in-flight policy (tollgate.Policy.InFlight)
// that it holds goes back when the chain returns, panic or not.
//
// The options mean what the options of tollgatehttp.Middleware of the same
// names mean, as in every tollgate adapter, and may come in any order.
package tollgategin

import (
	"net/http"
	"net/netip"
	"time"

	"github.com/gin-gonic/gin"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adapterkit"
	"github.com/tollgate-go/tollgate/core/tollgatehttp"
)

// An Option configures the handler New returns.
type Option func(*config)

type config struct {
	spec          adapterkit.Spec[*gin.Context]
	deny          func(*gin.Context, tollgate.Decision)
	missingTenant gin.HandlerFunc
	h             *adapterkit.Handler[*gin.Context]
}

// WithTenant sets how the handler finds the tenant of a request (default:
// the tollgatehttp.DefaultTenantHeader header); "" means it has none. The
// tenant should come from the authenticated principal, as TenantFromContext
// reads it: a bare header lets any client spend any tenant's budget.
func WithTenant(fn func(c *gin.Context) string) Option {
	return func(m *config) { m.spec.Tenant = fn }
}

// WithCost sets the tokens each request takes (default 1; n < 1 means 1).
// Register a separate handler on the routes that cost more.
func WithCost(n int64) Option {
	return func(m *config) { m.spec.Cost = n }
}

// WithCostFunc sets a function that gives the tokens each request takes; a
// result < 1 counts as 1. It wins over WithCost.
func WithCostFunc(fn func(c *gin.Context) int64) Option {
	return func(m *config) { m.spec.CostFunc = fn }
}

// WithSkip sets a function that exempts a request from limiting: it goes on
// down the chain without rate-limit headers and takes no tokens.
func WithSkip(fn func(c *gin.Context) bool) Option {
	return func(m *config) { m.spec.Skip = fn }
}

// WithRoute sets how logs and metrics name the route (default:
// c.FullPath(), the route pattern gin matched).
func WithRoute(fn func(c *gin.Context) string) Option {
	return func(m *config) { m.spec.Route = fn }
}

// WithBudget makes every request also draw from the named budget of its
// tenant's plan (see tollgate.Policy), such as "reports" on an export route.
// A budget that no plan has, when the Limiter's resolver knows its plans,
// is a configuration error, handled as a nil Limiter is.
func WithBudget(name string) Option {
	return func(m *config) { m.spec.Budget = name }
}

// WithMaxDelay holds a request that its tenant's policies would allow
// within d and then serves it, instead of answering 429: a client slightly
// over its rate is slowed down rather than bounced, and one refused for
// want of an in-flight slot waits for one. At most maxHeld requests of one
// tenant are held at once (0 means 16); past that, or past d, a request is
// answered at once. See tollgatehttp.WithMaxDelay.
func WithMaxDelay(d time.Duration, maxHeld int) Option {
	return func(m *config) { m.spec.MaxDelay, m.spec.MaxHeld = d, maxHeld }
}

// WithPartitionKey makes every RateLimit item carry the draft's partition
// key (pk): a keyed hash of the tenant, never the tenant ID. A secret
// shorter than 16 bytes is a configuration error, handled as a nil Limiter
// is. See tollgatehttp.WithPartitionKey.
func WithPartitionKey(secret []byte) Option {
	return func(m *config) { m.spec.PartitionKeySecret = secret }
}

// WithDenyHandler replaces the answer to a denied request (default
// c.AbortWithStatusJSON with 429, or 503, and the body that
// tollgatehttp.WriteDenial writes).
// When fn is called the chain is already aborted and the rate-limit headers,
// Retry-After included, are set; fn writes the response.
func WithDenyHandler(fn func(c *gin.Context, d tollgate.Decision)) Option {
	return func(m *config) { m.deny = fn }
}

// WithMissingTenantHandler replaces the answer to a request without a tenant
// (default 401 with a problem details body whose error is "missing_tenant"). fn either answers and
// aborts the chain, or returns without aborting, which lets the request
// through unlimited.
func WithMissingTenantHandler(fn gin.HandlerFunc) Option {
	return func(m *config) { m.missingTenant = fn }
}

// TenantFromHeader returns a tenant function for WithTenant that reads the
// request header name. Use it only behind a gateway that sets the header
// from the authenticated principal.
func TenantFromHeader(name string) func(*gin.Context) string {
	key := http.CanonicalHeaderKey(name)
	return func(c *gin.Context) string { return adapterkit.HeaderValue(c.Request.Header, key) }
}

// TenantFromContext returns a tenant function for WithTenant that reads the
// value the application's authentication middleware stored with
// c.Set(key, value). The value must be a string or a fmt.Stringer; anything
// else, or no value, is a missing tenant. Register the authentication
// middleware before the limiter.
func TenantFromContext(key any) func(*gin.Context) string {
	return func(c *gin.Context) string {
		v, _ := c.Get(key)
		return adapterkit.TenantString(v)
	}
}

// TenantFromClientIP returns a tenant function for WithTenant that keys each
// request by its client address (an IPv6 client by its /64). The address is
// the TCP peer's unless the peer is one of trustedProxies: only then are
// X-Forwarded-For and X-Real-IP believed, read from the right (see
// tollgatehttp.ClientIP). It ignores the engine's own trusted-proxy
// settings, which trust every address by default.
func TenantFromClientIP(trustedProxies ...netip.Prefix) func(*gin.Context) string {
	tenant := tollgatehttp.TenantFromClientIP(trustedProxies...)
	return func(c *gin.Context) string { return tenant(c.Request) }
}

// New returns gin middleware that limits each request with l. It sets the
// rate-limit headers on every limited response, aborts a denied request with
// 429 (or 503 under tollgate.WithFailClosed while the store is down) and a
// problem details body naming the retry time, and runs the rest of the
// chain for allowed requests. The Limiter's store is called with
// c.Request.Context().
//
// A nil l is a configuration error: New does not panic, but logs the error
// and returns a handler that answers every request with 500. So is a
// budget no plan has (see WithBudget).
func New(l *tollgate.Limiter, opts ...Option) gin.HandlerFunc {
	m := &config{spec: adapterkit.Spec[*gin.Context]{Limiter: l}}
	for _, o := range opts {
		if o != nil {
			o(m)
		}
	}
	var err error
	if m.h, err = adapterkit.Build(m.spec, adapterkit.Framework{}); err != nil {
		return misconfigured(err)
	}
	return m.handle
}

func (m *config) handle(c *gin.Context) {
	// The headers go straight into the header map: the names are
	// canonical already, and one backing array serves all the values,
	// where c.Header would canonicalise and allocate once per header.
	var call adapterkit.Call // set field by field: see adapterkit.Call
	call.Context, call.Method, call.Route, call.Header = c.Request.Context(), c.Request.Method, c.FullPath(), c.Request.Header
	a := m.h.Decide(c, &call, adapterkit.Headers{Map: c.Writer.Header()})
	if a == nil {
		return
	}
	// Released when the rest of the chain has run, panic or not: the
	// request's slot of an in-flight policy, if it holds one, goes back
	// then.
	defer a.Release()
	switch {
	case a.Status == 0:
		c.Next()
		return
	case a.Denied() && m.deny != nil:
		c.Abort()
		m.deny(c, a.Decision)
		return
	case a.MissingTenant() && m.missingTenant != nil:
		m.missingTenant(c)
		return
	}
	// gin keeps a Content-Type that is set already.
	h := c.Writer.Header()
	h["Content-Type"], h["X-Content-Type-Options"] = problemJSON, nosniff
	c.AbortWithStatusJSON(a.Status, a.Body)
}

var (
	nosniff     = []string{"nosniff"}
	problemJSON = []string{adapterkit.ProblemContentType}
)

// misconfigured logs err now, at start-up, and returns a handler that
// answers every request with 500, so that a configuration mistake is loud in
// the first test or deployment without crashing the process.
func misconfigured(err error) gin.HandlerFunc {
	adapterkit.LogMisconfiguration(err)
	return func(c *gin.Context) {
		// c.Errors reaches gin's logger, never the client.
		_ = c.Error(err)
		c.Writer.Header()["Content-Type"] = problemJSON
		c.AbortWithStatusJSON(http.StatusInternalServerError, adapterkit.InternalErrorBody)
	}
}
