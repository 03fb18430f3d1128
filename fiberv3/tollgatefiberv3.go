package tollgatefiberv3

import (
	"net/http"
	"net/netip"
	"time"
	"unsafe"

	"github.com/gofiber/fiber/v3"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adapterkit"
)

// Config configures the middleware New returns. Only Limiter is required;
// a zero field takes its value from ConfigDefault. A Config is read once,
// by New.
type Config struct {
	// Next, when it returns true, lets the request through unlimited and
	// without rate-limit headers.
	Next func(c fiber.Ctx) bool

	// Limiter decides on each request. Without one, New logs the mistake
	// and its handler answers every request 500.
	Limiter *tollgate.Limiter

	// Tenant returns the tenant of a request, or "" when it has none
	// (default: the X-Tenant-ID header). In
	// production the tenant should come from the authenticated principal:
	// see TenantFromContext. The middleware copies the result, which may
	// point into Fiber's buffers.
	Tenant func(c fiber.Ctx) string

	// Cost is the number of tokens each request takes (default 1; < 1
	// means 1). Register a separate handler on the routes that cost more.
	Cost int64

	// CostFunc, when set, gives the tokens each request takes instead of
	// Cost; a result < 1 counts as 1.
	CostFunc func(c fiber.Ctx) int64

	// Route names the route in logs and metrics (default
	// c.FullPath()). Under app.Use or a Group that is the middleware's
	// prefix, as Fiber matches the final route only after the middleware
	// has run; register the middleware on the route itself for the full
	// pattern.
	Route func(c fiber.Ctx) string

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
	// tollgatehttp.WithMaxDelay. Fiber's request context (c.Context())
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
	LimitReached func(c fiber.Ctx, d tollgate.Decision) error

	// MissingTenant answers a request without a tenant (default: 401 with
	// a JSON body whose error is "missing_tenant"). To let such requests through, pass
	// a handler that calls c.Next, or exempt them with Next.
	MissingTenant fiber.Handler
}

// ConfigDefault is the configuration New completes a Config with: no
// request skipped, the tenant from the X-Tenant-ID header, one token a
// request, the route from c.FullPath(), no request held (MaxDelay 0). It
// has no Limiter.
var ConfigDefault = Config{Cost: 1}

// New returns middleware that limits each request with config.Limiter; see
// Config for the defaults. The Limiter's store is called with c.Context().
//
// A Config without a Limiter is a configuration error that New logs at
// once, on slog's default logger; the handler then answers every request
// 500 with a JSON body whose error is "internal_error", rather than panic
// or let requests through unlimited. A Budget no plan has is treated the
// same way.
func New(config ...Config) fiber.Handler {
	cfg := ConfigDefault
	if len(config) > 0 {
		cfg = config[0]
	}
	h, err := adapterkit.Build(adapterkit.Spec[fiber.Ctx]{
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
		return func(c fiber.Ctx) error {
			return c.Status(http.StatusInternalServerError).JSON(adapterkit.InternalErrorBody, adapterkit.ProblemContentType)
		}
	}
	return func(c fiber.Ctx) error { return cfg.handle(h, c) }
}

func (cfg *Config) handle(h *adapterkit.Handler[fiber.Ctx], c fiber.Ctx) error {
	// SetCanonical, as tollgate's header names are in fasthttp's canonical
	// form already: c.Set would copy and normalise each name first.
	// fasthttp copies the bytes, so lending it the strings' is safe.
	// c.Method() and c.FullPath() are strings of the app's, which outlive
	// the request; the header is copied, as the Limiter may keep the
	// tenant.
	rh := &c.Response().Header
	set := func(name, value string) { rh.SetCanonical(bytesOf(name), bytesOf(value)) }
	var call adapterkit.Call // set field by field: see adapterkit.Call
	call.Context, call.Method, call.Route = c.Context(), c.Method(), c.FullPath()
	if cfg.Tenant == nil {
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
	rh.SetCanonical(headerNosniff, valueNosniff)
	return c.Status(a.Status).JSON(a.Body, adapterkit.ProblemContentType)
}

var (
	headerNosniff = []byte(fiber.HeaderXContentTypeOptions)
	valueNosniff  = []byte("nosniff")
)

// bytesOf returns the bytes of s without copying them; they must not be
// written to.
func bytesOf(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// stringOf returns b as a string without copying it; it is valid only as
// long as b is not changed, that is, until the request ends.
func stringOf(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// TenantFromHeader returns a Config.Tenant function that reads the request
// header name. Use it only behind a gateway that sets the header from the
// authenticated principal: a client can put anything in a header.
func TenantFromHeader(name string) func(c fiber.Ctx) string {
	return func(c fiber.Ctx) string {
		return stringOf(c.Request().Header.Peek(name))
	}
}

// TenantFromContext returns a Config.Tenant function that reads
// c.Locals(key), as set by the application's authentication middleware. The
// value must be a string or a fmt.Stringer; anything else, or no value, is a
// missing tenant. Register the authentication middleware before the
// limiter.
func TenantFromContext(key any) func(c fiber.Ctx) string {
	return func(c fiber.Ctx) string {
		return adapterkit.TenantString(c.Locals(key))
	}
}

// TenantFromClientIP returns a Config.Tenant function that keys each request
// by its client address (an IPv6 client by its /64): the TCP peer, unless the peer is one of trustedProxies; only
// then are X-Forwarded-For and X-Real-IP read, from the right, skipping
// trusted proxies and empty elements, so that a client can not pick its own
// address (see tollgatehttp.ClientIP). It ignores the app's TrustProxy
// settings. A request whose peer is not a TCP address counts as missing a
// tenant.
func TenantFromClientIP(trustedProxies ...netip.Prefix) func(c fiber.Ctx) string {
	return func(c fiber.Ctx) string {
		peer, _ := netip.AddrFromSlice(c.RequestCtx().RemoteIP())
		if peer.IsUnspecified() {
			// fasthttp's answer for a peer that is not TCP.
			return ""
		}
		var fwdArray [4]string
		fwd := fwdArray[:0]
		for _, v := range c.Request().Header.PeekAll(fiber.HeaderXForwardedFor) {
			fwd = append(fwd, stringOf(v))
		}
		realIP := stringOf(c.Request().Header.Peek("X-Real-Ip"))
		if ip := adapterkit.ForwardedClientIP(peer, fwd, realIP, trustedProxies); ip.IsValid() {
			return adapterkit.IPKey(ip)
		}
		return ""
	}
}
