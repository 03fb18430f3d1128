// Package tollgatefiber limits requests to a Fiber app per tenant with a
// tollgate.Limiter.
//
// New returns a fiber.Handler configured, in Fiber's manner, by a Config:
//
//	app.Use(tollgatefiber.New(tollgatefiber.Config{Limiter: l}))
//	app.Post("/reports", tollgatefiber.New(tollgatefiber.Config{Limiter: l, Cost: 10}), createReport)
//
// It sets the rate-limit headers on every limited response, answers a denied
// request with 429 (or 503 under tollgate.FailClosed when the store is down)
// and a JSON body through c.JSON, and passes allowed requests on with c.Next.
//
// Fiber reuses the memory behind the strings it hands out once a request
// ends. The middleware copies the tenant ID and the method before the
// Limiter sees them, so the strings in a Decision, a ThrottleEvent or a
// store key stay intact; Tenant functions need not copy.
package tollgatefiber

import (
	"log/slog"
	"net/http"
	"net/netip"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"
	tollgate "github.com/tollgate-go/tollgate/core"
)

// Config configures the middleware New returns. Only Limiter is required.
type Config struct {
	// Limiter decides on each request. Without one, New's handler answers
	// every request 500.
	Limiter *tollgate.Limiter

	// Next, when it returns true, lets the request through unlimited and
	// without rate-limit headers.
	Next func(c *fiber.Ctx) bool

	// Tenant returns the tenant of a request, or "" when it has none
	// (default TenantFromHeader("X-Tenant-ID")). In production the tenant
	// should come from the authenticated principal: see TenantFromLocals.
	// The middleware copies the result, which may point into Fiber's
	// buffers.
	Tenant func(c *fiber.Ctx) string

	// Cost is the number of tokens each request takes (default 1).
	Cost int64

	// CostFunc, when set, gives the tokens each request takes instead of
	// Cost; a result < 1 counts as 1.
	CostFunc func(c *fiber.Ctx) int64

	// Route names the route of a request in throttle events and logs
	// (default c.Route().Path). Under app.Use or a Group that is the
	// middleware's prefix, as Fiber matches the final route only after the
	// middleware has run; register the middleware on the route itself for
	// the full path. Return patterns, not raw paths, so that logs do not
	// get a route per URL.
	Route func(c *fiber.Ctx) string

	// LimitReached answers a denied request (default: the Decision's
	// DenialStatus with its DenialBody as JSON). The rate-limit headers,
	// Retry-After included, are already set.
	LimitReached func(c *fiber.Ctx, d tollgate.Decision) error

	// MissingTenant answers a request without a tenant (default: 401 with
	// tollgate.MissingTenantBody). To let such requests through, pass a
	// handler that calls c.Next, or exempt them with Next.
	MissingTenant fiber.Handler
}

// ConfigDefault is the configuration New completes a Config with: the
// tenant from the X-Tenant-ID header, one token a request and the route
// from c.Route().Path. It has no Limiter.
var ConfigDefault = Config{
	Tenant: TenantFromHeader("X-Tenant-ID"),
	Cost:   1,
	Route:  routePath,
}

// New returns middleware that limits each request with config.Limiter; see
// Config for the defaults.
//
// A Config without a Limiter is a configuration error that New logs once,
// with slog.Default; the handler then answers every request 500 with
// tollgate.InternalErrorBody rather than panic or let requests through
// unlimited.
func New(config ...Config) fiber.Handler {
	cfg := ConfigDefault
	if len(config) > 0 {
		cfg = config[0]
	}
	if cfg.Limiter == nil {
		slog.Error("tollgatefiber: New: Config.Limiter is nil; every request will be answered 500")
		return func(c *fiber.Ctx) error {
			return c.Status(http.StatusInternalServerError).JSON(tollgate.InternalErrorBody)
		}
	}
	if cfg.Tenant == nil {
		cfg.Tenant = ConfigDefault.Tenant
	}
	if cfg.Cost < 1 {
		cfg.Cost = 1
	}
	if cfg.Route == nil {
		cfg.Route = ConfigDefault.Route
	}
	return cfg.handle
}

func (cfg *Config) handle(c *fiber.Ctx) error {
	if cfg.Next != nil && cfg.Next(c) {
		return c.Next()
	}
	cost := cfg.Cost
	if cfg.CostFunc != nil {
		cost = max(cfg.CostFunc(c), 1)
	}
	a := cfg.Limiter.Answer(c.UserContext(), tollgate.Request{
		Tenant: strings.Clone(cfg.Tenant(c)),
		Cost:   cost,
		Method: method(c.Method()),
		Route:  cfg.Route(c),
	})
	// SetCanonical, as tollgate's header names are in fasthttp's canonical
	// form already: c.Set would copy and normalise each name first.
	h := &c.Response().Header
	a.Decision.VisitHeaders(func(name, value string) {
		h.SetCanonical(utils.UnsafeBytes(name), utils.UnsafeBytes(value))
	})
	switch {
	case a.Status == 0:
		return c.Next()
	case a.MissingTenant() && cfg.MissingTenant != nil:
		return cfg.MissingTenant(c)
	case a.Denied() && cfg.LimitReached != nil:
		return cfg.LimitReached(c, a.Decision)
	}
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	return c.Status(a.Status).JSON(a.Body)
}

func routePath(c *fiber.Ctx) string { return c.Route().Path }

// method returns m as one of the net/http constants, which outlive the
// request, and copies only methods that are not among them.
func method(m string) string {
	switch m {
	case http.MethodGet:
		return http.MethodGet
	case http.MethodPost:
		return http.MethodPost
	case http.MethodPut:
		return http.MethodPut
	case http.MethodPatch:
		return http.MethodPatch
	case http.MethodDelete:
		return http.MethodDelete
	case http.MethodHead:
		return http.MethodHead
	case http.MethodOptions:
		return http.MethodOptions
	}
	return strings.Clone(m)
}

// TenantFromHeader returns a Config.Tenant function that reads the request
// header name. Use it only behind a gateway that sets the header from the
// authenticated principal: a client can put anything in a header.
func TenantFromHeader(name string) func(c *fiber.Ctx) string {
	return func(c *fiber.Ctx) string {
		return utils.UnsafeString(c.Request().Header.Peek(name))
	}
}

// TenantFromLocals returns a Config.Tenant function that reads c.Locals(key),
// as set by the application's authentication middleware. The value must be
// a string or a fmt.Stringer; anything else, or no value, is a missing
// tenant.
func TenantFromLocals(key any) func(c *fiber.Ctx) string {
	return func(c *fiber.Ctx) string {
		return tollgate.TenantString(c.Locals(key))
	}
}

// TenantFromIP returns a Config.Tenant function that keys each request by
// c.IP(), grouped by tollgate.IPKey (an IPv6 client by its /64), so that
// the app's ProxyHeader, EnableTrustedProxyCheck and TrustedProxies settings
// decide whom to believe. Set all three or none: with a ProxyHeader and no
// proxy check, every client picks its own address. And mind that for an
// X-Forwarded-For ProxyHeader Fiber takes the leftmost address, which the
// client wrote unless the proxy replaces the header; prefer a header the
// proxy sets, such as X-Real-IP, or TenantFromClientIP.
func TenantFromIP() func(c *fiber.Ctx) string {
	return func(c *fiber.Ctx) string {
		return tollgate.IPKeyString(c.IP())
	}
}

// TenantFromClientIP returns a Config.Tenant function that keys each request
// by its client address as tollgate.ClientIP finds it, grouped by
// tollgate.IPKey: the TCP peer, unless the peer is one of trustedProxies;
// only then are X-Forwarded-For and X-Real-IP read, from the right,
// skipping trusted proxies, so that a client can not pick its own address.
// It ignores the app's ProxyHeader settings.
func TenantFromClientIP(trustedProxies ...netip.Prefix) func(c *fiber.Ctx) string {
	return func(c *fiber.Ctx) string {
		peer, _ := netip.AddrFromSlice(c.Context().RemoteIP())
		var fwd []string
		for _, v := range c.Request().Header.PeekAll(fiber.HeaderXForwardedFor) {
			fwd = append(fwd, utils.UnsafeString(v))
		}
		realIP := utils.UnsafeString(c.Request().Header.Peek("X-Real-Ip"))
		if ip := tollgate.ForwardedClientIP(peer, fwd, realIP, trustedProxies); ip.IsValid() {
			return tollgate.IPKey(ip)
		}
		return ""
	}
}
