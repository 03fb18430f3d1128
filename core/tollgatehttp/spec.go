package tollgatehttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// DefaultTenantHeader is the request header that middleware of every
// framework reads the tenant from when the application gives no tenant
// function. It suits a gateway that sets the header from the authenticated
// principal; a client can put anything in a header.
const DefaultTenantHeader = "X-Tenant-ID"

// canonicalTenantHeader is DefaultTenantHeader in the canonical form of
// net/http, which finds it without first allocating that form anew on
// every request; other frameworks match names in any case.
var canonicalTenantHeader = http.CanonicalHeaderKey(DefaultTenantHeader)

// A Spec is what every adapter's configuration means, defined once: each
// adapter translates its framework's idiom (gin options, an Echo or Fiber
// Config, gRPC interceptor options, net/http options) into a Spec, and the
// meaning of each field is the same everywhere. C is the framework's request
// context: *http.Request, *gin.Context, echo.Context, fiber.Ctx and so on.
//
// Every function may be nil, which means its default; the order in which an
// adapter's options are given never matters.
type Spec[C any] struct {
	// Limiter decides on every request that Skip does not exempt. It is
	// required: a nil Limiter is a configuration error that Build
	// reports, and the adapters answer every request 500 rather than
	// panic or let requests through unlimited.
	Limiter *tollgate.Limiter

	// Tenant finds the tenant of a request; "" means the request has
	// none, which is answered 401 unless the adapter's missing-tenant
	// answer says otherwise. Default: the DefaultTenantHeader header.
	// The tenant should come from the authenticated principal.
	Tenant func(c C) string

	// Cost is the tokens each request takes; < 1 means 1.
	Cost int64

	// CostFunc, if set, gives the tokens each request takes instead of
	// Cost; a result < 1 counts as 1.
	CostFunc func(c C) int64

	// Skip, if set, exempts the requests for which it returns true: they
	// go on without a decision, without rate-limit headers, and take
	// nothing.
	Skip func(c C) bool

	// Route names the request's route in events, logs and metrics: the
	// router's pattern, never the raw path. Default: the adapter's own
	// (its router's matched pattern).
	Route func(c C) string

	// Budget, if set, makes every request also draw from the budget of
	// that name, with the figures its tenant's plan gives the budget
	// (see tollgate.Policy). It must be a valid name (tollgate.ValidName).
	Budget string
}

// A Framework is what an adapter tells Build about its framework's
// requests. Every function is required but Route.
type Framework[C any] struct {
	Context func(c C) context.Context     // the request's context, for the store call
	Method  func(c C) string              // the request method, for events
	Header  func(c C, name string) string // a request header, for the default tenant
	Route   func(c C) string              // the matched route pattern, for the default Route
}

// A Handler decides on the requests of one framework as a Spec says. Build
// one with Build; it is safe for concurrent use.
type Handler[C any] struct {
	limiter   *tollgate.Limiter
	tenant    func(C) string
	cost      int64
	costFunc  func(C) int64
	skip      func(C) bool
	budget    string
	context   func(C) context.Context
	method    func(C) string
	routeFunc func(any) string
}

// ErrNoLimiter is the configuration error of a Spec without a Limiter.
var ErrNoLimiter = errors.New("tollgatehttp: the Limiter is nil")

// Build checks s and returns the Handler that applies it to requests of fw.
func Build[C any](s Spec[C], fw Framework[C]) (*Handler[C], error) {
	if s.Limiter == nil {
		return nil, ErrNoLimiter
	}
	if s.Budget != "" && !tollgate.ValidName(s.Budget) {
		return nil, fmt.Errorf("tollgatehttp: Budget %q is not a valid name (1 to %d letters, digits or \"-_.:/+\")", s.Budget, tollgate.MaxNameLength)
	}
	h := &Handler[C]{
		limiter:  s.Limiter,
		tenant:   s.Tenant,
		cost:     max(s.Cost, 1),
		costFunc: s.CostFunc,
		skip:     s.Skip,
		budget:   s.Budget,
		context:  fw.Context,
		method:   fw.Method,
	}
	if h.tenant == nil {
		header := fw.Header
		h.tenant = func(c C) string { return header(c, canonicalTenantHeader) }
	}
	route := s.Route
	if route == nil {
		route = fw.Route
	}
	if route != nil {
		h.routeFunc = func(c any) string { return route(c.(C)) }
	}
	return h, nil
}

// Decide decides on the request c and writes the answer into a, unless Skip
// exempts c: it then reports false and leaves a alone.
func (h *Handler[C]) Decide(c C, a *Answer) bool {
	if h.skip != nil && h.skip(c) {
		return false
	}
	cost := h.cost
	if h.costFunc != nil {
		cost = max(h.costFunc(c), 1)
	}
	req := tollgate.Request{
		Tenant:    h.tenant(c),
		Cost:      cost,
		Budget:    h.budget,
		Method:    h.method(c),
		RouteFunc: h.routeFunc,
		RouteArg:  c,
	}
	Decide(h.context(c), h.limiter, &req, a)
	return true
}
