package tollgatehttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

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

	// MaxDelay, if > 0, holds a request that the policies would allow
	// within MaxDelay, on its own goroutine, and then serves it, instead
	// of answering 429: a client slightly over its rate is slowed down
	// rather than bounced (nginx's limit_req delay). A request that would
	// wait longer, or past its context's deadline, gets 429 at once. The
	// headers describe the state after the wait. A request whose context
	// ends while held (its client went away) gives its tokens back.
	MaxDelay time.Duration

	// MaxHeld bounds the requests of one tenant held at once under
	// MaxDelay (default DefaultMaxHeld); past it, a request is decided
	// without waiting.
	MaxHeld int
}

// DefaultMaxHeld is the number of requests of one tenant that the delay mode
// holds at once unless Spec.MaxHeld says otherwise.
const DefaultMaxHeld = 16

// A Framework is what an adapter tells Build about its framework's
// requests. Every function is required but Route.
type Framework[C any] struct {
	Context func(c C) context.Context     // the request's context, for the store call
	Method  func(c C) string              // the request method, for events
	Header  func(c C, name string) string // a request header, for the default tenant; name is in canonical form
	Route   func(c C) string              // the matched route pattern, for the default Route

	// CopyTenant is set for frameworks that reuse the memory behind the
	// strings a request gives (fasthttp's): Build then copies what a
	// Spec's Tenant returns, which the Limiter may keep. Header must copy
	// on its own.
	CopyTenant bool
}

// A Handler decides on the requests of one framework as a Spec says. Build
// one with Build; it is safe for concurrent use.
type Handler[C any] struct {
	limiter   *tollgate.Limiter
	maxDelay  time.Duration
	held      *heldCounts // when maxDelay > 0
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
	if s.MaxDelay < 0 || s.MaxHeld < 0 {
		return nil, fmt.Errorf("tollgatehttp: MaxDelay and MaxHeld must be >= 0, got %v and %d", s.MaxDelay, s.MaxHeld)
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
		maxDelay: s.MaxDelay,
	}
	if s.MaxDelay > 0 {
		maxHeld := s.MaxHeld
		if maxHeld == 0 {
			maxHeld = DefaultMaxHeld
		}
		h.held = &heldCounts{max: maxHeld, counts: map[string]int{}}
	}
	if h.tenant == nil {
		header := fw.Header
		h.tenant = func(c C) string { return header(c, canonicalTenantHeader) }
	} else if fw.CopyTenant {
		tenant := h.tenant
		h.tenant = func(c C) string { return strings.Clone(tenant(c)) }
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
	ctx := h.context(c)
	if h.held == nil || !h.held.acquire(req.Tenant) {
		Decide(ctx, h.limiter, &req, a)
		return true
	}
	defer h.held.release(req.Tenant)
	req.MaxDelay = h.maxDelay
	if deadline, ok := ctx.Deadline(); ok {
		// A request whose context ends before its slot would be held
		// only to fail: it is decided as if it could not wait that long.
		req.MaxDelay = min(req.MaxDelay, time.Until(deadline))
	}
	Decide(ctx, h.limiter, &req, a)
	if a.Status == 0 && a.Decision.Delay > 0 {
		if err := h.limiter.Hold(ctx, &a.Decision); err != nil {
			// The client went away while held; whatever is written
			// now reaches no one, and the tokens went back.
			a.Status, a.Body = http.StatusServiceUnavailable, ResponseBody{Error: CodeUnavailable, Message: "request cancelled while held"}
		}
	}
	return true
}

// heldCounts counts the requests of each tenant that the delay mode holds.
type heldCounts struct {
	max    int
	mu     sync.Mutex
	counts map[string]int // tenants with requests held now
}

// acquire reports whether another request of tenant may be held, and
// counts it if so.
func (hc *heldCounts) acquire(tenant string) bool {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if hc.counts[tenant] >= hc.max {
		return false
	}
	hc.counts[tenant]++
	return true
}

func (hc *heldCounts) release(tenant string) {
	hc.mu.Lock()
	if hc.counts[tenant]--; hc.counts[tenant] <= 0 {
		delete(hc.counts, tenant)
	}
	hc.mu.Unlock()
}
