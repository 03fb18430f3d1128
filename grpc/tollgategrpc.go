package tollgategrpc

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adapterkit"
)

// An Option configures the interceptors that UnaryServerInterceptor and
// StreamServerInterceptor return; a nil Option changes nothing.
type Option func(*config)

type config struct {
	spec          adapterkit.Spec[call]
	methodCosts   map[string]int64
	methodBudgets map[string]string
	err           error // the first malformed or conflicting option
}

// WithTenant sets how the interceptor finds the tenant of a call (default:
// the incoming metadata key x-tenant-id). The tenant should come from the
// authenticated principal, as TenantFromContext reads it: a bare metadata
// value lets any client spend any tenant's budget; "" means the call has
// none. See tollgatehttp.WithTenant.
func WithTenant(fn func(ctx context.Context) string) Option {
	return func(c *config) {
		if fn == nil {
			c.spec.Tenant = nil
			return
		}
		c.spec.Tenant = func(cl call) string { return fn(cl.ctx) }
	}
}

// WithCost sets the tokens each call takes (default 1; n < 1 means 1), for
// the methods that WithMethodCosts does not name.
func WithCost(n int64) Option {
	return func(c *config) { c.spec.Cost = n }
}

// WithMethodCosts sets the tokens the calls of the methods in costs take,
// by full method name ("/reports.v1.Reports/Create") or, for every method of
// a service, by the service's name between slashes ("/reports.v1.Reports/");
// a method's own entry wins over its service's. A cost < 1 means 1. It may
// be given more than once; naming a method twice with two costs is a
// configuration error, as is giving WithCostFunc too.
func WithMethodCosts(costs map[string]int64) Option {
	return func(c *config) {
		for k, n := range costs {
			if old, ok := c.methodCosts[k]; ok && old != n {
				c.fail(fmt.Errorf("tollgategrpc: WithMethodCosts: %q has two costs, %d and %d", k, old, n))
			}
			if c.methodCosts == nil {
				c.methodCosts = make(map[string]int64, len(costs))
			}
			c.methodCosts[k] = n
		}
	}
}

// WithCostFunc sets a function that gives the tokens a call of fullMethod
// takes; a result < 1 counts as 1. It wins over WithCost.
func WithCostFunc(fn func(ctx context.Context, fullMethod string) int64) Option {
	return func(c *config) {
		if fn == nil {
			c.spec.CostFunc = nil
			return
		}
		c.spec.CostFunc = func(cl call) int64 { return fn(cl.ctx, cl.method) }
	}
}

// WithSkip sets a function that exempts calls from limiting: they reach
// their handler without rate-limit metadata and take nothing. Health checks
// are the usual example.
func WithSkip(fn func(ctx context.Context, fullMethod string) bool) Option {
	return func(c *config) {
		if fn == nil {
			c.spec.Skip = nil
			return
		}
		c.spec.Skip = func(cl call) bool { return fn(cl.ctx, cl.method) }
	}
}

// WithBudget makes every call also draw from the named budget of its
// tenant's plan (see tollgate.Policy), for the methods that
// WithMethodBudgets does not name. A budget that no plan has, when the
// Limiter's resolver knows its plans, is a configuration error, as a nil
// Limiter is.
func WithBudget(name string) Option {
	return func(c *config) { c.spec.Budget = name }
}

// WithMethodBudgets makes the calls of the methods in budgets also draw from
// the budget named for them (see tollgate.Policy), such as "reports" for
// "/reports.v1.Reports/Create". Methods are named as in WithMethodCosts, and
// the same rules apply.
func WithMethodBudgets(budgets map[string]string) Option {
	return func(c *config) {
		for k, b := range budgets {
			if old, ok := c.methodBudgets[k]; ok && old != b {
				c.fail(fmt.Errorf("tollgategrpc: WithMethodBudgets: %q has two budgets, %q and %q", k, old, b))
			}
			if c.methodBudgets == nil {
				c.methodBudgets = make(map[string]string, len(budgets))
			}
			c.methodBudgets[k] = b
		}
	}
}

// WithPartitionKey makes every ratelimit item carry the draft's partition
// key (pk): a keyed hash of the tenant, never the tenant ID. A secret
// shorter than 16 bytes is a configuration error, as a nil Limiter is. See
// tollgatehttp.WithPartitionKey.
func WithPartitionKey(secret []byte) Option {
	return func(c *config) { c.spec.PartitionKeySecret = secret }
}

// WithMaxDelay holds a call that its tenant's policies would allow within
// d, before its handler runs, and then lets it through, instead of
// refusing it with codes.ResourceExhausted: a client slightly over its
// rate is slowed down rather than sent back to retry, and a call refused
// for want of an in-flight slot waits for one. At most maxHeld calls
// of one tenant are held at once (0 means 16); past that, past d, or past
// the call's own deadline, a call is decided at once. A call cancelled
// while held gives its tokens back. The header metadata describes the
// state after the wait; plans in shadow mode never hold a call. See
// tollgatehttp.WithMaxDelay.
func WithMaxDelay(d time.Duration, maxHeld int) Option {
	return func(c *config) { c.spec.MaxDelay, c.spec.MaxHeld = d, maxHeld }
}

// TenantFromContext returns a tenant function for WithTenant that reads the
// context value of key, as the application's authentication interceptor
// stores it. The value must be a string or a fmt.Stringer; anything else,
// or no value, is a missing tenant. Install the authentication interceptor
// before the limiter.
func TenantFromContext(key any) func(ctx context.Context) string {
	return func(ctx context.Context) string {
		return adapterkit.TenantString(ctx.Value(key))
	}
}

// TenantFromMetadata returns a tenant function for WithTenant that reads
// the first value of the incoming metadata key (any case). Use it only
// behind a proxy that sets the key from the authenticated principal: a
// client can send anything.
func TenantFromMetadata(key string) func(ctx context.Context) string {
	key = strings.ToLower(key)
	return func(ctx context.Context) string { return metadataValue(ctx, key) }
}

// call is what the interceptors know of a call: its context (with the
// incoming metadata) and its full method name.
type call struct {
	ctx    context.Context
	method string
}

// interceptor decides on the calls of one pair of interceptors.
type interceptor struct {
	handler       *adapterkit.Handler[call]
	byMethod      map[string]*adapterkit.Handler[call] // by method or service, for the methods with a budget of their own
	defaultTenant bool                                 // the tenant is the x-tenant-id metadata
}

func (c *config) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

func newInterceptor(l *tollgate.Limiter, opts []Option) (*interceptor, error) {
	c := &config{spec: adapterkit.Spec[call]{Limiter: l}}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	if c.err != nil {
		return nil, c.err
	}
	for k := range c.methodCosts {
		if !validMethodKey(k) {
			return nil, fmt.Errorf("tollgategrpc: WithMethodCosts: %q is neither a full method name (\"/pkg.Service/Method\") nor a service (\"/pkg.Service/\")", k)
		}
	}
	for k := range c.methodBudgets {
		if !validMethodKey(k) {
			return nil, fmt.Errorf("tollgategrpc: WithMethodBudgets: %q is neither a full method name (\"/pkg.Service/Method\") nor a service (\"/pkg.Service/\")", k)
		}
	}
	if len(c.methodCosts) > 0 {
		if c.spec.CostFunc != nil {
			return nil, fmt.Errorf("tollgategrpc: WithCostFunc and WithMethodCosts are both given; the cost function would ignore the method costs")
		}
		costs, fallback := c.methodCosts, max(c.spec.Cost, 1)
		c.spec.CostFunc = func(cl call) int64 {
			if n, ok := lookupMethod(costs, cl.method); ok {
				return n
			}
			return fallback
		}
	}
	ic := &interceptor{defaultTenant: c.spec.Tenant == nil}
	var err error
	if ic.handler, err = adapterkit.Build(c.spec, adapterkit.Framework{}); err != nil {
		return nil, err
	}
	if len(c.methodBudgets) == 0 {
		return ic, nil
	}
	// One Handler per budget, shared by the methods that draw from it.
	handlers := map[string]*adapterkit.Handler[call]{c.spec.Budget: ic.handler}
	ic.byMethod = make(map[string]*adapterkit.Handler[call], len(c.methodBudgets))
	for k, budget := range c.methodBudgets {
		h, ok := handlers[budget]
		if !ok {
			spec := c.spec
			spec.Budget = budget
			if h, err = adapterkit.Build(spec, adapterkit.Framework{}); err != nil {
				return nil, fmt.Errorf("tollgategrpc: WithMethodBudgets: %q: %w", k, err)
			}
			handlers[budget] = h
		}
		ic.byMethod[k] = h
	}
	return ic, nil
}

// validMethodKey reports whether k is "/service/method" or "/service/".
func validMethodKey(k string) bool {
	service, method, ok := strings.Cut(strings.TrimPrefix(k, "/"), "/")
	return ok && k[0] == '/' && service != "" && !strings.Contains(method, "/")
}

// lookupMethod finds the entry of fullMethod in m, or else that of its
// service.
func lookupMethod[V any](m map[string]V, fullMethod string) (V, bool) {
	if v, ok := m[fullMethod]; ok {
		return v, true
	}
	if i := strings.LastIndexByte(fullMethod, '/'); i > 0 {
		v, ok := m[fullMethod[:i+1]]
		return v, ok
	}
	var zero V
	return zero, false
}

func (ic *interceptor) handlerFor(fullMethod string) *adapterkit.Handler[call] {
	if ic.byMethod != nil {
		if h, ok := lookupMethod(ic.byMethod, fullMethod); ok {
			return h
		}
	}
	return ic.handler
}

// decide decides on a call of fullMethod and returns the header metadata to
// send (nil for none), the answer, to release when the call ends (nil if
// the call was exempted), and the status error that refuses the call (nil
// to let it through).
func (ic *interceptor) decide(ctx context.Context, fullMethod string) (headers metadata.MD, a *adapterkit.Answer, refusal error) {
	// Every gRPC call is an HTTP/2 POST, which is what logs and metrics
	// report as its method; its route is its full method name.
	var fields metadataFields
	var kc adapterkit.Call // set field by field: see adapterkit.Call
	kc.Context, kc.Method, kc.Route = ctx, http.MethodPost, fullMethod
	if ic.defaultTenant {
		kc.Tenant = metadataValue(ctx, keyTenant)
	}
	a = ic.handlerFor(fullMethod).Decide(call{ctx: ctx, method: fullMethod}, &kc, adapterkit.Headers{Set: fields.set})
	if a == nil {
		return nil, nil, nil
	}
	if a.Status != 0 {
		refusal = statusOf(a)
	}
	return fields.md, a, refusal
}

// release hands a back when the call has ended, which gives back its slot
// of an in-flight policy, if it holds one.
func release(a *adapterkit.Answer) {
	if a != nil {
		a.Release()
	}
}

// UnaryServerInterceptor returns an interceptor that limits each unary call
// with l before its handler runs, as the package documentation describes.
//
// A nil l, or a malformed or conflicting option, is a configuration error:
// it is logged once, now, and the interceptor refuses every call with
// codes.Internal rather than panic or let calls through unlimited.
func UnaryServerInterceptor(l *tollgate.Limiter, opts ...Option) grpc.UnaryServerInterceptor {
	ic, err := newInterceptor(l, opts)
	if err != nil {
		adapterkit.LogMisconfiguration(err)
		return func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) {
			return nil, errInternal
		}
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, a, refusal := ic.decide(ctx, info.FullMethod)
		// When the handler has returned, or panicked.
		defer release(a)
		if md != nil {
			// It fails only when the headers are gone already, which
			// an interceptor that runs first can not have caused; the
			// call is decided either way.
			_ = grpc.SetHeader(ctx, md)
		}
		if refusal != nil {
			return nil, refusal
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor returns an interceptor that limits each stream
// with l once, when it opens, before its handler runs: the messages sent on
// it afterwards take nothing, and a slot of an in-flight policy that it
// takes is held until the stream ends. Otherwise it is
// UnaryServerInterceptor's counterpart, configuration errors included.
func StreamServerInterceptor(l *tollgate.Limiter, opts ...Option) grpc.StreamServerInterceptor {
	ic, err := newInterceptor(l, opts)
	if err != nil {
		adapterkit.LogMisconfiguration(err)
		return func(any, grpc.ServerStream, *grpc.StreamServerInfo, grpc.StreamHandler) error {
			return errInternal
		}
	}
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		md, a, refusal := ic.decide(ss.Context(), info.FullMethod)
		// When the stream has ended: its handler has returned, or
		// panicked.
		defer release(a)
		if md != nil {
			_ = ss.SetHeader(md)
		}
		if refusal != nil {
			return refusal
		}
		return handler(srv, ss)
	}
}
