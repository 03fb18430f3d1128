// Package grpctest is a conformance kit for tollgate's gRPC interceptors:
// the decision table of core/adaptertest (its plans, its budget, its
// figures), run through real gRPC connections over an in-memory listener,
// once with unary calls and once with streams.
//
// A test calls Run with a function that returns the server options
// installing the interceptors under test for a Setup. The kit puts its own
// authentication in front of them: an interceptor that moves the tenant of
// the incoming metadata (x-tenant-id, or x-tenant-id-bin for tenants that a
// text value can not carry) into the context under TenantKey. Each of the
// two services, UnaryService and StreamService, must then be limited so:
//
//	Limited   with Setup.Limiter, the tenant from TenantFromContext(TenantKey{}), cost 1
//	Costly    the same, cost 5
//	Skipped   the same, but exempted by the skip function
//	Reports   the same, cost 1, also drawing from the budget adaptertest.Budget
//	ByHeader  with every default of the interceptor: the tenant is the
//	          x-tenant-id metadata itself
//	Held      as Limited, and in the delay mode: a call that its tenant's plan
//	          allows within adaptertest.HeldDelay is held and then served (the
//	          interceptor's WithMaxDelay(adaptertest.HeldDelay, 0))
//	Slow      as Limited; its handler does the work of the x-slow metadata (it may
//	          wait, and panic: a panic ends the call with codes.Internal). Tenant
//	          "t-slots" is on adaptertest's plan Slots, which caps its calls in
//	          flight at adaptertest.SlotsInFlight
//
// Use grpc.ChainUnaryInterceptor and grpc.ChainStreamInterceptor, so that
// the kit's authentication runs first.
//
// With Setup.Limiter nil, every interceptor must log the mistake once, when
// it is built, and end every call with codes.Internal, never panic. Run
// swaps slog's default logger to see that, so it must not run in parallel
// with other tests of the package.
package grpctest

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adapterkit"
	"github.com/tollgate-go/tollgate/core/adaptertest"
	"github.com/tollgate-go/tollgate/core/storetest"
)

// maxTenantLength is the longest tenant ID the engine accepts, in bytes.
const maxTenantLength = 256

// A Setup is what a server under test limits with. Its Limiter is nil in
// one case only, NilLimiter, which checks the answer to that mistake.
type Setup struct {
	Limiter *tollgate.Limiter
}

// A NewServer returns the server options that install the interceptors
// under test, limiting with setup as the package documentation says.
type NewServer func(t *testing.T, setup Setup) []grpc.ServerOption

// The metadata keys of the rate-limit fields.
var (
	keyLimit     = strings.ToLower(adapterkit.HeaderLimit)
	keyRemaining = strings.ToLower(adapterkit.HeaderRemaining)
	keyReset     = strings.ToLower(adapterkit.HeaderReset)
	keyPolicy    = strings.ToLower(adapterkit.HeaderPolicy)
	keyRateLimit = strings.ToLower(adapterkit.HeaderRateLimit)
	keyRetry     = strings.ToLower(adapterkit.HeaderRetry)

	rateLimitKeys = []string{keyLimit, keyRemaining, keyReset, keyPolicy, keyRateLimit, keyRetry}
)

type kit struct {
	t       *testing.T
	service string
	conn    *grpc.ClientConn
	clock   *storetest.Clock
	tenants *tollgate.StaticResolver
	events  *adaptertest.Events
	limiter *tollgate.Limiter
	work    *adaptertest.SlowWork
}

// newKit starts a server whose limiter uses the reference store on a
// stopped clock, or the given store instead.
func newKit(t *testing.T, service string, newServer NewServer, store tollgate.Store, opts ...tollgate.Option) *kit {
	t.Helper()
	clock := storetest.NewClock()
	if store == nil {
		store = storetest.NewModelStore(clock.Now)
	}
	return startKit(t, service, newServer, store, append([]tollgate.Option{adaptertest.WithClock(clock.Now)}, opts...), clock)
}

// newRealTimeKit starts a server whose limiter uses the reference store on
// the real clock, for the cases that wait.
func newRealTimeKit(t *testing.T, service string, newServer NewServer, opts ...tollgate.Option) *kit {
	t.Helper()
	return startKit(t, service, newServer, storetest.NewModelStore(time.Now), opts, nil)
}

func startKit(t *testing.T, service string, newServer NewServer, store tollgate.Store, opts []tollgate.Option, clock *storetest.Clock) *kit {
	t.Helper()
	resolver := adaptertest.NewResolver(t)
	events := &adaptertest.Events{}
	opts = append([]tollgate.Option{tollgate.WithLogger(nil), tollgate.WithObserver(events)}, opts...)
	l, err := tollgate.New(store, resolver, opts...)
	if err != nil {
		t.Fatal(err)
	}
	work := adaptertest.NewSlowWork()
	conn := serve(t, work, newServer(t, Setup{Limiter: l})...)
	return &kit{t: t, service: service, conn: conn, clock: clock, tenants: resolver, events: events, limiter: l, work: work}
}

// A reply is what a client saw of one call.
type reply struct {
	status   *status.Status
	header   metadata.MD
	messages []string
}

func (r reply) String() string {
	return fmt.Sprintf("%s %q (messages %q, header %v)", r.status.Code(), r.status.Message(), r.messages, r.header)
}

// outgoing returns ctx carrying tenant the way the kit's authentication
// reads it; "" carries none.
func outgoing(ctx context.Context, tenant string) context.Context {
	switch {
	case tenant == "":
		return ctx
	case textValue(tenant):
		return metadata.AppendToOutgoingContext(ctx, tenantKey, tenant)
	}
	return metadata.AppendToOutgoingContext(ctx, binaryTenantKey, tenant)
}

// textValue reports whether s can travel as a text metadata value.
func textValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return utf8.ValidString(s) && strings.TrimSpace(s) == s
}

// call calls method of the kit's service as tenant, over the real
// connection.
func (k *kit) call(method, tenant string) reply {
	k.t.Helper()
	r, err := call(k.conn, k.service, method, tenant)
	if err != nil {
		k.t.Fatalf("%s: %v", method, err)
	}
	return r
}

// call calls method of service as tenant; the error is the client's own
// trouble, not the call's status.
func call(conn *grpc.ClientConn, service, method, tenant string) (reply, error) {
	return callWith(context.Background(), conn, service, method, tenant, "")
}

// callWith is call with ctx, and with how as the x-slow metadata of the
// call, if not "".
func callWith(ctx context.Context, conn *grpc.ClientConn, service, method, tenant, how string) (reply, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ctx = outgoing(ctx, tenant)
	if how != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, slowKey, how)
	}
	full := FullMethod(service, method)
	var r reply
	if service == UnaryService {
		out := new(wrapperspb.StringValue)
		err := conn.Invoke(ctx, full, wrapperspb.String("hi"), out, grpc.Header(&r.header))
		r.status = status.Convert(err)
		if err == nil {
			r.messages = []string{out.GetValue()}
		}
		return r, nil
	}
	stream, err := conn.NewStream(ctx, &grpc.StreamDesc{StreamName: method, ServerStreams: true}, full)
	if err != nil {
		return r, err
	}
	if err := stream.SendMsg(wrapperspb.String("hi")); err != nil && err != io.EOF {
		return r, err
	}
	if err := stream.CloseSend(); err != nil {
		return r, err
	}
	for {
		out := new(wrapperspb.StringValue)
		err := stream.RecvMsg(out)
		if err == io.EOF {
			break
		}
		if err != nil {
			r.status = status.Convert(err)
			break
		}
		r.messages = append(r.messages, out.GetValue())
	}
	if r.status == nil {
		r.status = status.New(codes.OK, "")
	}
	r.header, _ = stream.Header()
	return r, nil
}

// wantOK checks that r reached the handler and ended well.
func (k *kit) wantOK(r reply) {
	k.t.Helper()
	want := 1
	if k.service == StreamService {
		want = StreamMessages
	}
	if r.status.Code() != codes.OK || len(r.messages) != want || r.messages[0] != "ok" {
		k.t.Fatalf("got %v, want OK and %d messages from the handler", r, want)
	}
}

// wantCode checks r's status code, that the handler was not reached, and
// that no internal error text leaked.
func (k *kit) wantCode(r reply, code codes.Code) {
	k.t.Helper()
	if r.status.Code() != code {
		k.t.Fatalf("got %v, want %s", r, code)
	}
	if len(r.messages) != 0 {
		k.t.Errorf("the handler answered %q on a refused call", r.messages)
	}
	if msg := r.status.Message(); strings.Contains(msg, "secret") || strings.Contains(msg, "10.1.2.3") {
		k.t.Errorf("the status message leaks internal error text: %q", msg)
	}
}

// wantFigures checks every rate-limit field of r against a single-policy
// plan, the remaining tokens, the seconds until the bucket is full
// (x-ratelimit-reset) and the seconds until its next token (ratelimit's t):
// the values the HTTP kit wants of the headers.
func (k *kit) wantFigures(r reply, plan tollgate.Plan, remaining, resetSecs, nextSecs int64) {
	k.t.Helper()
	window := int64(float64(plan.Limit.Burst) / plan.Limit.Rate)
	want := map[string]string{
		keyLimit:     strconv.FormatInt(plan.Limit.Burst, 10),
		keyRemaining: strconv.FormatInt(remaining, 10),
		keyReset:     strconv.FormatInt(k.clock.Now().Unix()+resetSecs, 10),
		keyPolicy:    fmt.Sprintf(`"%s";q=%d;w=%d`, plan.Name, plan.Limit.Burst, window),
		keyRateLimit: fmt.Sprintf(`"%s";r=%d;t=%d`, plan.Name, remaining, nextSecs),
	}
	for key, v := range want {
		if got := r.header.Get(key); len(got) != 1 || got[0] != v {
			k.t.Errorf("metadata %s = %q, want exactly [%q]", key, got, v)
		}
	}
}

func (k *kit) wantNoFigures(r reply) {
	k.t.Helper()
	for _, key := range rateLimitKeys {
		if v := r.header.Get(key); len(v) > 0 {
			k.t.Errorf("metadata %s = %q, want none", key, v)
		}
	}
}

// wantRetry checks that a ResourceExhausted r says to retry in secs seconds,
// in its RetryInfo detail and in its retry-after metadata.
func (k *kit) wantRetry(r reply, secs int64) {
	k.t.Helper()
	var infos []*errdetails.RetryInfo
	for _, d := range r.status.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			infos = append(infos, ri)
		}
	}
	if len(infos) != 1 {
		k.t.Fatalf("%d RetryInfo details in %v, want 1", len(infos), r.status.Details())
	}
	if got := infos[0].GetRetryDelay().AsDuration(); got != time.Duration(secs)*time.Second {
		k.t.Errorf("RetryInfo retry delay = %v, want %ds", got, secs)
	}
	if got, want := r.header.Get(keyRetry), strconv.FormatInt(secs, 10); len(got) != 1 || got[0] != want {
		k.t.Errorf("metadata %s = %q, want [%q]", keyRetry, got, want)
	}
}

// Run runs the whole decision table, first with unary calls, then with
// streams, against servers with the options newServer returns.
func Run(t *testing.T, newServer NewServer) {
	for _, service := range Services {
		name := "Unary"
		if service == StreamService {
			name = "Stream"
		}
		t.Run(name, func(t *testing.T) { run(t, service, newServer) })
	}
}

func run(t *testing.T, service string, newServer NewServer) {
	small, big := adaptertest.Small, adaptertest.Big

	t.Run("FiguresOnAllowed", func(t *testing.T) {
		k := newKit(t, service, newServer, nil)
		for i := int64(1); i <= small.Limit.Burst; i++ {
			r := k.call(Limited, "t-small")
			k.wantOK(r)
			k.wantFigures(r, small, small.Limit.Burst-i, i, 1)
			if v := r.header.Get(keyRetry); len(v) > 0 {
				t.Errorf("retry-after = %q on an allowed call", v)
			}
		}
	})

	t.Run("BurstThenResourceExhausted", func(t *testing.T) {
		k := newKit(t, service, newServer, nil)
		for i := int64(0); i < small.Limit.Burst; i++ {
			k.wantOK(k.call(Limited, "t-small"))
		}
		r := k.call(Limited, "t-small")
		k.wantCode(r, codes.ResourceExhausted)
		k.wantFigures(r, small, 0, 3, 1)
		k.wantRetry(r, 1)
		if !strings.Contains(r.status.Message(), `"small"`) && !strings.Contains(r.status.Message(), "(small)") {
			t.Errorf("message %q does not name the policy %q", r.status.Message(), small.Name)
		}
		// A token comes back after a second, on the store's clock.
		k.clock.Advance(999 * time.Millisecond)
		k.wantCode(k.call(Limited, "t-small"), codes.ResourceExhausted)
		k.clock.Advance(time.Millisecond)
		k.wantOK(k.call(Limited, "t-small"))
	})

	t.Run("RetryDelayRoundsUp", func(t *testing.T) {
		k := newKit(t, service, newServer, nil)
		for i := int64(0); i < small.Limit.Burst; i++ {
			k.call(Limited, "t-small")
		}
		k.clock.Advance(100 * time.Millisecond) // 0.9s to go
		r := k.call(Limited, "t-small")
		k.wantCode(r, codes.ResourceExhausted)
		k.wantRetry(r, 1)
	})

	t.Run("TenantsAreIsolated", func(t *testing.T) {
		k := newKit(t, service, newServer, nil)
		for i := int64(0); i < small.Limit.Burst; i++ {
			k.call(Limited, "tenant-a")
		}
		k.wantCode(k.call(Limited, "tenant-a"), codes.ResourceExhausted)
		r := k.call(Limited, "tenant-b")
		k.wantOK(r)
		k.wantFigures(r, small, small.Limit.Burst-1, 1, 1)
	})

	t.Run("Plans", func(t *testing.T) {
		k := newKit(t, service, newServer, nil)
		r := k.call(Limited, "t-big")
		k.wantOK(r)
		k.wantFigures(r, big, big.Limit.Burst-1, 1, 1)
		// A plan change applies from the next call on.
		if err := k.tenants.Assign("t-big", "small"); err != nil {
			t.Fatal(err)
		}
		r = k.call(Limited, "t-big")
		k.wantOK(r)
		if got := r.header.Get(keyLimit); len(got) != 1 || got[0] != "3" {
			t.Errorf("after the downgrade %s = %q, want [3]", keyLimit, got)
		}
	})

	t.Run("Cost", func(t *testing.T) {
		k := newKit(t, service, newServer, nil)
		r := k.call(Costly, "t-big")
		k.wantOK(r)
		k.wantFigures(r, big, 5, 1, 1)
		r = k.call(Costly, "t-big")
		k.wantOK(r)
		k.wantFigures(r, big, 0, 1, 1)
		r = k.call(Costly, "t-big")
		k.wantCode(r, codes.ResourceExhausted)
		k.wantRetry(r, 1) // 5 tokens in 500ms
	})

	t.Run("CostAboveBurstIsAnError", func(t *testing.T) {
		k := newKit(t, service, newServer, nil)
		r := k.call(Costly, "t-tiny")
		k.wantCode(r, codes.Internal)
		k.wantNoFigures(r)
		if len(r.status.Details()) != 0 {
			t.Errorf("details %v on a call that can never succeed", r.status.Details())
		}
	})

	t.Run("Skip", func(t *testing.T) {
		k := newKit(t, service, newServer, nil)
		for i := 0; i < 10; i++ {
			r := k.call(Skipped, "t-small")
			k.wantOK(r)
			k.wantNoFigures(r)
		}
		r := k.call(Limited, "t-small")
		k.wantFigures(r, small, small.Limit.Burst-1, 1, 1) // skipped calls took nothing
	})

	t.Run("MissingTenant", func(t *testing.T) {
		k := newKit(t, service, newServer, nil)
		for _, method := range []string{Limited, ByHeader} {
			r := k.call(method, "")
			k.wantCode(r, codes.Unauthenticated)
			k.wantNoFigures(r)
		}
	})

	t.Run("InvalidTenant", func(t *testing.T) {
		k := newKit(t, service, newServer, nil)
		tooLong := strings.Repeat("t", maxTenantLength+1)
		for _, tc := range []struct{ method, tenant string }{
			{Limited, tooLong}, {ByHeader, tooLong},
			// Binary metadata carries what text can not, to the
			// authenticated methods.
			{Limited, "nul\x00byte"}, {Limited, "\x00"}, {Limited, "line\nbreak"}, {Limited, "del\x7f"},
		} {
			r := k.call(tc.method, tc.tenant)
			k.wantCode(r, codes.InvalidArgument)
			k.wantNoFigures(r)
		}
		k.wantOK(k.call(Limited, strings.Repeat("t", maxTenantLength)))
	})

	t.Run("TenantFromMetadataByDefault", func(t *testing.T) {
		k := newKit(t, service, newServer, nil)
		r := k.call(ByHeader, "t-big")
		k.wantOK(r)
		k.wantFigures(r, big, big.Limit.Burst-1, 1, 1)
		// The same bucket as the authenticated methods': the tenant is one.
		r = k.call(Limited, "t-big")
		k.wantFigures(r, big, big.Limit.Burst-2, 1, 1)
	})

	t.Run("BudgetAndRouteName", func(t *testing.T) {
		k := newKit(t, service, newServer, nil)
		r := k.call(Reports, "t-big")
		k.wantOK(r)
		if got, want := r.header.Get(keyPolicy), `"big";q=10;w=1, "big-reports";q=2;w=2`; len(got) != 1 || got[0] != want {
			t.Errorf("%s = %q, want [%q]", keyPolicy, got, want)
		}
		if got, want := r.header.Get(keyRateLimit), `"big";r=9;t=1, "big-reports";r=1;t=1`; len(got) != 1 || got[0] != want {
			t.Errorf("%s = %q, want [%q]", keyRateLimit, got, want)
		}
		if got := r.header.Get(keyLimit); len(got) != 1 || got[0] != "2" {
			t.Errorf("%s = %q, want [2]: the budget is closest to denying", keyLimit, got)
		}
		k.wantOK(k.call(Reports, "t-big"))
		r = k.call(Reports, "t-big")
		k.wantCode(r, codes.ResourceExhausted)
		if !strings.Contains(r.status.Message(), "big-reports") {
			t.Errorf("message %q does not name the policy big-reports", r.status.Message())
		}
		// The plan's own bucket spent 2 of 10 and nothing on the denial;
		// methods without the budget still pass.
		r = k.call(Limited, "t-big")
		k.wantOK(r)
		k.wantFigures(r, big, 7, 1, 1)
		e := k.events.Last(t)
		if want := FullMethod(service, Reports); e.Policy != "big-reports" || e.Route != want {
			t.Errorf("throttled decision: policy %q route %q; want big-reports and %q", e.Policy, e.Route, want)
		}
		if e.Tenant != "t-big" || e.Budget != adaptertest.Budget {
			t.Errorf("throttled decision: tenant %q budget %q", e.Tenant, e.Budget)
		}
	})

	t.Run("FailOpen", func(t *testing.T) {
		k := newKit(t, service, newServer, adaptertest.FailingStore{})
		r := k.call(Limited, "t-small")
		k.wantOK(r)
		k.wantNoFigures(r)
	})

	t.Run("FailClosed", func(t *testing.T) {
		k := newKit(t, service, newServer, adaptertest.FailingStore{}, tollgate.WithFailClosed(true))
		r := k.call(Limited, "t-small")
		k.wantCode(r, codes.Unavailable)
		k.wantNoFigures(r)
	})

	t.Run("Shadow", func(t *testing.T) {
		k := newKit(t, service, newServer, nil, tollgate.WithShadow())
		for range small.Limit.Burst + 2 {
			r := k.call(Limited, "t-small")
			k.wantOK(r)
			k.wantNoFigures(r)
		}
		if e := k.events.Last(t); e.Outcome() != "shadow_denied" {
			t.Errorf("last throttled decision: %s, want shadow_denied", e.Outcome())
		}
	})

	t.Run("ShadowHeaders", func(t *testing.T) {
		k := newKit(t, service, newServer, nil, tollgate.WithShadow(small.Name), tollgate.WithShadowHeaders(true))
		for i := int64(1); i <= small.Limit.Burst+1; i++ {
			r := k.call(Limited, "t-small")
			k.wantOK(r)
			k.wantFigures(r, small, max(small.Limit.Burst-i, 0), min(i, small.Limit.Burst), 1)
		}
	})

	t.Run("HostileTenants", func(t *testing.T) {
		k := newKit(t, service, newServer, nil)
		for _, tenant := range []string{
			strings.Repeat("A", 200), "{x}", "%00", "\u00e9\u00e8", "t-small ", `"quoted"`, "a,b", "../../x", "\xff\xfe",
		} {
			r := k.call(Limited, tenant)
			k.wantOK(r)
			if got := r.header.Get(keyRemaining); len(got) != 1 || got[0] != "2" {
				t.Errorf("tenant %.20q: %s = %q, want [2] (a bucket of its own)", tenant, keyRemaining, got)
			}
		}
	})

	t.Run("DelayMode", func(t *testing.T) { runDelayMode(t, service, newServer) })

	t.Run("ShadowNeverHolds", func(t *testing.T) { runShadowNeverHolds(t, service, newServer) })

	t.Run("InFlight", func(t *testing.T) { runInFlight(t, service, newServer) })

	t.Run("ConcurrentCalls", func(t *testing.T) {
		k := newKit(t, service, newServer, nil)
		var mu sync.Mutex
		codeCount := map[codes.Code]int{}
		var wg sync.WaitGroup
		for range 40 {
			wg.Go(func() {
				r, err := call(k.conn, service, Limited, "t-big")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				codeCount[r.status.Code()]++
				mu.Unlock()
			})
		}
		wg.Wait()
		if codeCount[codes.OK] != int(big.Limit.Burst) || codeCount[codes.ResourceExhausted] != 40-int(big.Limit.Burst) {
			t.Fatalf("codes %v, want exactly %d OK and the rest ResourceExhausted with the clock stopped", codeCount, big.Limit.Burst)
		}
	})

	t.Run("NilLimiter", func(t *testing.T) {
		logs := adaptertest.CaptureDefaultLog(t)
		k := &kit{t: t, service: service, conn: Serve(t, newServer(t, Setup{})...)}
		cause := adapterkit.ErrNoLimiter.Error()
		built := logs.Count(cause)
		if built == 0 {
			t.Errorf("building interceptors without a Limiter logged no misconfiguration naming it:\n%s", logs)
		}
		for _, method := range Methods {
			for range 2 {
				r := k.call(method, "t-small")
				k.wantCode(r, codes.Internal)
				k.wantNoFigures(r)
				if strings.Contains(r.status.Message(), "nil") {
					t.Errorf("%s: message %q names the cause, which is for the log", method, r.status.Message())
				}
			}
		}
		if n := logs.Count(cause); n != built {
			t.Errorf("the misconfiguration was logged %d times at build and %d times by calls; want only at build", built, n-built)
		}
	})

	if service == StreamService {
		t.Run("StreamLimitedOnceWhenOpened", func(t *testing.T) {
			k := newKit(t, service, newServer, nil)
			r := k.call(Limited, "t-big")
			k.wantOK(r) // StreamMessages messages
			k.wantFigures(r, big, big.Limit.Burst-1, 1, 1)
			r = k.call(Limited, "t-big")
			k.wantFigures(r, big, big.Limit.Burst-2, 1, 1)
		})
	}
}
