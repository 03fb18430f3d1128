// Package tollgatefiber limits requests to a Fiber app per tenant with a
// tollgate.Limiter.
//
// New returns a fiber.Handler configured, in Fiber's manner, by a Config:
//
//	app.Use(tollgatefiber.New(tollgatefiber.Config{Limiter: l}))
//	app.Post("/reports", tollgatefiber.New(tollgatefiber.Config{Limiter: l, Cost: 10}), createReport)
//
// It sets the rate-limit headers on every limited response, answers a denied
// request with 429 (or 503 under tollgate.WithFailClosed when the store is
// down) and an RFC 9457 problem details body through c.JSON (Content-Type
// application/problem+json), a request without a tenant with 401 and one
// whose tenant ID is too long or holds a control character with 400, and
// passes allowed requests on with c.Next. A request that holds a slot of an
// in-flight policy (tollgate.Policy.InFlight) gives it back when c.Next
// returns, panic or not: a panic must still be recovered, by Fiber's
// recover middleware registered before this one. The fields mean what the
// options of tollgatehttp.Middleware of the same names mean, as in every
// tollgate adapter (Next is WithSkip, LimitReached WithDenyHandler).
//
// Fiber reuses the memory behind the strings it hands out once a request
// ends. The middleware copies the tenant ID and the method before the
// Limiter sees them, so the strings in a Decision or a store key stay
// intact; Tenant functions need not copy.
package tollgatefiber

import (
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adapterkit"
)

// Config configures the middleware New returns. Only Limiter is required.
type Config struct {
	// Limiter decides on each request. Without one, New logs the mistake
	// and its handler answers every request 500.
	Limiter *tollgate.Limiter

	// Next, when it returns true, lets the request through unlimited and
	// without rate-limit headers.
	Next func(c *fiber.Ctx) bool

	// Tenant returns the tenant of a request, or "" when it has none
	// (default: the X-Tenant-ID header). In
	// production the tenant should come from the authenticated principal:
	// see TenantFromContext. The middleware copies the result, which may
	// point into Fiber's buffers.
	Tenant func(c *fiber.Ctx) string

	// Cost is the number of tokens each request takes (default 1).
	Cost int64

	// CostFunc, when set, gives the tokens each request takes instead of
	// Cost; a result < 1 counts as 1.
	CostFunc func(c *fiber.Ctx) int64

	// Route names the route in logs and metrics (default
	// c.Route().Path). Under app.Use or a Group that is the middleware's
	// prefix, as Fiber matches the final route only after the middleware
	// has run; register the middleware on the route itself for the full
	// pattern.
	Route func(c *fiber.Ctx) string

	// Budget, if set, makes every request also draw from the budget of
	// that name in its tenant's plan (see tollgate.Policy). A budget that
	// no plan has, when the Limiter's resolver knows its plans, is a
	// configuration error, as a missing Limiter is.
	Budget string

	// MaxDelay, if > 0, holds a request that its tenant's policies would
	// allow within MaxDelay and then serves it, instead of answering 429:
	// a client slightly over its rate is slowed down rather than
	// bounced, and one refused for want of an in-flight slot waits for
	// one. A request that would wait longer is answered at once. See
	// tollgatehttp.WithMaxDelay. Fiber's request context (c.UserContext)
	// does not end when the client goes away, so a held request is
	// served at its time even then.
	MaxDelay time.Duration

	// MaxHeld bounds the requests of one tenant held at once under
	// MaxDelay (0 means 16); past it, a request is answered at once.
	MaxHeld int

	// PartitionKeySecret, if set, makes every RateLimit item carry the
	// draft's partition key (pk): a keyed hash of the tenant, never the
	// tenant ID. A secret shorter than 16 bytes is a configuration error.
	// See tollgatehttp.WithPartitionKey.
	PartitionKeySecret []byte

	// LimitReached answers a denied request (default: 429, or 503, with
	// the problem details body of every tollgate adapter through c.JSON).
	// The rate-limit headers, Retry-After included, are already set.
	LimitReached func(c *fiber.Ctx, d tollgate.Decision) error

	// MissingTenant answers a request without a tenant (default: 401 with
	// a JSON body whose error is "missing_tenant"). To let such requests through, pass
	// a handler that calls c.Next, or exempt them with Next.
	MissingTenant fiber.Handler
}

// ConfigDefault is the configuration New completes a Config with: the
// tenant from the X-Tenant-ID header, one token a request and the route
// from c.Route().Path. It has no Limiter.
var ConfigDefault = Config{Cost: 1}

// New returns middleware that limits each request with config.Limiter; see
// Config for the defaults.
//
// A Config without a Limiter is a configuration error that New logs at
// once, with slog.Default; the handler then answers every request 500 with
// a JSON body whose error is "internal_error", rather than panic or let
// requests through unlimited. A budget no plan has is treated the same way.
func New(config ...Config) fiber.Handler {
	cfg := ConfigDefault
	if len(config) > 0 {
		cfg = config[0]
	}
	h, err := adapterkit.Build(adapterkit.Spec[*fiber.Ctx]{
		Limiter:  cfg.Limiter,
		Tenant:   cfg.Tenant,
		Cost:     cfg.Cost,
		CostFunc: cfg.CostFunc,
		Skip:     cfg.Next,
		Route:    cfg.Route,
		Budget:   cfg.Budget,
		MaxDelay: cfg.MaxDelay,
		MaxHeld:  cfg.MaxHeld,

		PartitionKeySecret: cfg.PartitionKeySecret,
	}, adapterkit.Framework{CopyTenant: true})
	if err != nil {
		adapterkit.LogMisconfiguration(err)
		return func(c *fiber.Ctx) error {
			return c.Status(http.StatusInternalServerError).JSON(adapterkit.InternalErrorBody, adapterkit.ProblemContentType)
		}
	}
	return func(c *fiber.Ctx) error { return cfg.handle(h, c) }
}

func (cfg *Config) handle(h *adapterkit.Handler[*fiber.Ctx], c *fiber.Ctx) error {
	// SetCanonical, as tollgate's header names are in fasthttp's canonical
	// form already: c.Set would copy and normalise each name first.
	rh := &c.Response().Header
	set := func(name, value string) { rh.SetCanonical(utils.UnsafeBytes(name), utils.UnsafeBytes(value)) }
	var call adapterkit.Call // set field by field: see adapterkit.Call
	call.Context, call.Method, call.Route = c.UserContext(), method(c.Method()), c.Route().Path
	if cfg.Tenant == nil {
		// A copy, as the Limiter may keep the tenant.
		call.Tenant = string(c.Request().Header.Peek(adapterkit.TenantHeader))
	}
	a := h.Decide(c, &call, adapterkit.Headers{Set: set})
	if a == nil {
		return c.Next()
	}
	defer a.Release()
	switch {
	case a.Status == 0:
		return c.Next()
	case a.MissingTenant() && cfg.MissingTenant != nil:
		return cfg.MissingTenant(c)
	case a.Denied() && cfg.LimitReached != nil:
		return cfg.LimitReached(c, a.Decision)
	}
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	return c.Status(a.Status).JSON(a.Body, adapterkit.ProblemContentType)
}

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

// TenantFromContext returns a Config.Tenant function that reads
// c.Locals(key), as set by the application's authentication middleware. The
// value must be a string or a fmt.Stringer; anything else, or no value, is a
// missing tenant.
func TenantFromContext(key any) func(c *fiber.Ctx) string {
	return func(c *fiber.Ctx) string {
		return adapterkit.TenantString(c.Locals(key))
	}
}

// TenantFromClientIP returns a Config.Tenant function that keys each request
// by its client address (an IPv6 client by its /64): the TCP peer, unless the peer is one of trustedProxies; only
// then are X-Forwarded-For and X-Real-IP read, from the right, skipping
// trusted proxies, so that a client can not pick its own address. It
// ignores the app's ProxyHeader settings.
func TenantFromClientIP(trustedProxies ...netip.Prefix) func(c *fiber.Ctx) string {
	return func(c *fiber.Ctx) string {
		peer, _ := netip.AddrFromSlice(c.Context().RemoteIP())
		var fwd []string
		for _, v := range c.Request().Header.PeekAll(fiber.HeaderXForwardedFor) {
			fwd = append(fwd, utils.UnsafeString(v))
		}
		realIP := utils.UnsafeString(c.Request().Header.Peek("X-Real-Ip"))
		if ip := adapterkit.ForwardedClientIP(peer, fwd, realIP, trustedProxies); ip.IsValid() {
			return adapterkit.IPKey(ip)
		}
		return ""
	}
}
