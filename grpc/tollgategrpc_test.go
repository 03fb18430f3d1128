package tollgategrpc_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adapterkit"
	"github.com/tollgate-go/tollgate/core/adaptertest"
	"github.com/tollgate-go/tollgate/core/storetest"
	tollgategrpc "github.com/tollgate-go/tollgate/grpc"
	"github.com/tollgate-go/tollgate/grpc/grpctest"
)

// kitServer installs the interceptors as the kit asks: one pair for the
// authenticated methods, one with every default for ByHeader, and one in
// the delay mode for Held, each skipping the others' methods.
func kitServer(t *testing.T, s grpctest.Setup) []grpc.ServerOption {
	costs := map[string]int64{}
	budgets := map[string]string{}
	for _, svc := range grpctest.Services {
		costs[grpctest.FullMethod(svc, grpctest.Costly)] = 5
		budgets[grpctest.FullMethod(svc, grpctest.Reports)] = adaptertest.Budget
	}
	authed := []tollgategrpc.Option{
		tollgategrpc.WithTenant(tollgategrpc.TenantFromContext(grpctest.TenantKey{})),
		tollgategrpc.WithMethodCosts(costs),
		tollgategrpc.WithMethodBudgets(budgets),
		tollgategrpc.WithSkip(func(_ context.Context, method string) bool {
			return isMethod(method, grpctest.Skipped) || isMethod(method, grpctest.ByHeader) || isMethod(method, grpctest.Held)
		}),
	}
	byHeader := []tollgategrpc.Option{
		tollgategrpc.WithSkip(func(_ context.Context, method string) bool { return !isMethod(method, grpctest.ByHeader) }),
	}
	held := []tollgategrpc.Option{
		tollgategrpc.WithTenant(tollgategrpc.TenantFromContext(grpctest.TenantKey{})),
		tollgategrpc.WithMaxDelay(adaptertest.HeldDelay, 0),
		tollgategrpc.WithSkip(func(_ context.Context, method string) bool { return !isMethod(method, grpctest.Held) }),
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(
			tollgategrpc.UnaryServerInterceptor(s.Limiter, authed...),
			tollgategrpc.UnaryServerInterceptor(s.Limiter, byHeader...),
			tollgategrpc.UnaryServerInterceptor(s.Limiter, held...)),
		grpc.ChainStreamInterceptor(
			tollgategrpc.StreamServerInterceptor(s.Limiter, authed...),
			tollgategrpc.StreamServerInterceptor(s.Limiter, byHeader...),
			tollgategrpc.StreamServerInterceptor(s.Limiter, held...)),
	}
}

func isMethod(fullMethod, name string) bool { return strings.HasSuffix(fullMethod, "/"+name) }

func TestConformance(t *testing.T) {
	grpctest.Run(t, kitServer)
}

// newLimiter returns a Limiter on a stopped clock: every tenant on a plan of
// 100 tokens, with a "reports" budget of 10 and an "exports" budget of 20.
func newLimiter(t *testing.T) (*tollgate.Limiter, *adaptertest.Events) {
	t.Helper()
	plan := tollgate.Plan{Name: "plan", Limit: tollgate.Limit{Rate: 1, Burst: 100}, Policies: []tollgate.Policy{
		{Budget: "reports", Limit: tollgate.Limit{Rate: 1, Burst: 10}},
		{Budget: "exports", Limit: tollgate.Limit{Rate: 1, Burst: 20}},
	}}
	l, events, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(plan))
	return l, events
}

// serve serves the kit's services behind both interceptors, made with opts.
func serve(t *testing.T, l *tollgate.Limiter, opts ...tollgategrpc.Option) *grpc.ClientConn {
	t.Helper()
	return grpctest.Serve(t,
		grpc.ChainUnaryInterceptor(tollgategrpc.UnaryServerInterceptor(l, opts...)),
		grpc.ChainStreamInterceptor(tollgategrpc.StreamServerInterceptor(l, opts...)))
}

// invoke makes a unary call of method of the kit's Unary service with md
// as outgoing metadata (key, value pairs) and returns its status and
// header metadata.
func invoke(t *testing.T, conn *grpc.ClientConn, method string, md ...string) (*status.Status, metadata.MD) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, md...)
	var header metadata.MD
	err := conn.Invoke(ctx, grpctest.FullMethod(grpctest.UnaryService, method), wrapperspb.String("hi"), new(wrapperspb.StringValue), grpc.Header(&header))
	return status.Convert(err), header
}

// openStream opens a stream of method of the kit's Stream service and
// returns the status it ends with.
func openStream(t *testing.T, conn *grpc.ClientConn, method string, md ...string) *status.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, md...)
	s, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, grpctest.FullMethod(grpctest.StreamService, method))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMsg(wrapperspb.String("hi")); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	s.CloseSend()
	for {
		if err := s.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			if err == io.EOF {
				return status.New(codes.OK, "")
			}
			return status.Convert(err)
		}
	}
}

func remaining(t *testing.T, header metadata.MD) string {
	t.Helper()
	v := header.Get("x-ratelimit-remaining")
	if len(v) != 1 {
		t.Fatalf("x-ratelimit-remaining = %q, want one value", v)
	}
	return v[0]
}

func TestConfigurationErrors(t *testing.T) {
	l, _ := newLimiter(t)
	for _, tc := range []struct {
		name    string
		l       *tollgate.Limiter
		opts    []tollgategrpc.Option
		logNote string
	}{
		{"NilLimiter", nil, nil, "Limiter is nil"},
		{"BadMethodCost", l, []tollgategrpc.Option{tollgategrpc.WithMethodCosts(map[string]int64{"Reports/Create": 2})}, "WithMethodCosts"},
		{"BadMethodBudgetKey", l, []tollgategrpc.Option{tollgategrpc.WithMethodBudgets(map[string]string{"/a/b/c": "reports"})}, "WithMethodBudgets"},
		{"BadBudgetName", l, []tollgategrpc.Option{tollgategrpc.WithBudget("no spaces")}, "Budget"},
		{"BudgetNoPlanHas", l, []tollgategrpc.Option{tollgategrpc.WithBudget("reprots")}, "reprots"},
		{"MethodBudgetNoPlanHas", l, []tollgategrpc.Option{tollgategrpc.WithMethodBudgets(map[string]string{"/a/": "exprts"})}, "exprts"},
		{"BadMethodBudgetName", l, []tollgategrpc.Option{tollgategrpc.WithMethodBudgets(map[string]string{"/a/": "no spaces"})}, "WithMethodBudgets"},
		{"TwoCosts", l, []tollgategrpc.Option{
			tollgategrpc.WithMethodCosts(map[string]int64{"/a/b": 2}),
			tollgategrpc.WithMethodCosts(map[string]int64{"/a/b": 3}),
		}, "two costs"},
		{"TwoBudgets", l, []tollgategrpc.Option{
			tollgategrpc.WithMethodBudgets(map[string]string{"/a/": "reports"}),
			tollgategrpc.WithMethodBudgets(map[string]string{"/a/": "exports"}),
		}, "two budgets"},
		{"CostFuncAndMethodCosts", l, []tollgategrpc.Option{
			tollgategrpc.WithCostFunc(func(context.Context, string) int64 { return 1 }),
			tollgategrpc.WithMethodCosts(map[string]int64{"/a/b": 2}),
		}, "WithCostFunc and WithMethodCosts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := adaptertest.CaptureDefaultLog(t)
			conn := serve(t, tc.l, tc.opts...)
			if n := strings.Count(logs.String(), "rate limiter misconfigured"); n != 2 || !strings.Contains(logs.String(), tc.logNote) {
				t.Errorf("log %q: want the error, naming %q, once per interceptor", logs.String(), tc.logNote)
			}
			for range 2 {
				st, header := invoke(t, conn, grpctest.Limited, "x-tenant-id", "acme")
				if st.Code() != codes.Internal || st.Message() != adapterkit.InternalErrorBody.Message || len(header) != 0 {
					t.Errorf("unary: %v %q, header %v; want Internal %q and no metadata", st.Code(), st.Message(), header, adapterkit.InternalErrorBody.Message)
				}
				if st := openStream(t, conn, grpctest.Limited, "x-tenant-id", "acme"); st.Code() != codes.Internal {
					t.Errorf("stream: %v, want Internal", st.Code())
				}
			}
		})
	}
}

func TestMethodCostsAndBudgets(t *testing.T) {
	l, events := newLimiter(t)
	reports := grpctest.FullMethod(grpctest.UnaryService, grpctest.Reports)
	// Given in an order that would matter if options overwrote each other.
	conn := serve(t, l,
		tollgategrpc.WithMethodBudgets(map[string]string{
			"/" + grpctest.UnaryService + "/": "exports", // every method of the service...
			reports:                           "reports", // ...but this one
		}),
		tollgategrpc.WithMethodCosts(map[string]int64{
			"/" + grpctest.UnaryService + "/": 4,
			reports:                           2,
			"/" + grpctest.StreamService + "/" + grpctest.Costly: 0, // counts as 1
		}),
		tollgategrpc.WithCost(3),
		tollgategrpc.WithBudget("reports"),
		nil, // ignored
	)
	tenant := []string{"x-tenant-id", "acme"}

	st, h := invoke(t, conn, grpctest.Reports, tenant...)
	if st.Code() != codes.OK || remaining(t, h) != "8" || !strings.Contains(h.Get("ratelimit")[0], `"plan-reports";r=8`) {
		t.Fatalf("Reports: %v, header %v; want the reports budget charged 2", st.Code(), h)
	}
	st, h = invoke(t, conn, grpctest.Limited, tenant...)
	if st.Code() != codes.OK || !strings.Contains(h.Get("ratelimit")[0], `"plan-exports";r=16`) || !strings.Contains(h.Get("ratelimit")[0], `"plan";r=94`) {
		t.Fatalf("Limited: %v, header %v; want the service's budget and cost, 4", st.Code(), h)
	}
	// The stream service has no method budget: WithBudget applies, and
	// WithCost for the methods the map does not name.
	if st := openStream(t, conn, grpctest.Limited, tenant...); st.Code() != codes.OK {
		t.Fatal(st)
	}
	if st := openStream(t, conn, grpctest.Costly, tenant...); st.Code() != codes.OK {
		t.Fatal(st)
	}
	_, h = invoke(t, conn, grpctest.Reports, tenant...)
	if got := h.Get("ratelimit")[0]; !strings.Contains(got, `"plan";r=88`) || !strings.Contains(got, `"plan-reports";r=2`) {
		t.Errorf("ratelimit %q: want 100-2-4-3-1-2 = 88 on the plan and 10-2-3-1-2 = 2 on reports", got)
	}
	// Drain reports: the throttled decision names the route, the budget
	// and POST.
	for {
		st, _ := invoke(t, conn, grpctest.Reports, tenant...)
		if st.Code() == codes.ResourceExhausted {
			break
		}
		if st.Code() != codes.OK {
			t.Fatal(st)
		}
	}
	e := events.Last(t)
	if e.Route != reports || e.Budget != "reports" || e.Method != http.MethodPost || e.Tenant != "acme" {
		t.Errorf("throttled on route %q budget %q method %q tenant %q", e.Route, e.Budget, e.Method, e.Tenant)
	}
}

func TestTenantAndCostFunctions(t *testing.T) {
	l, _ := newLimiter(t)
	var seen []string
	var mu sync.Mutex
	conn := serve(t, l,
		tollgategrpc.WithTenant(tollgategrpc.TenantFromMetadata("X-Customer")),
		tollgategrpc.WithCostFunc(func(ctx context.Context, method string) int64 {
			mu.Lock()
			seen = append(seen, method)
			mu.Unlock()
			if _, ok := metadata.FromIncomingContext(ctx); !ok {
				t.Error("the cost function's context has no incoming metadata")
			}
			return 7
		}),
		tollgategrpc.WithCost(1), // the function wins
	)
	st, h := invoke(t, conn, grpctest.Limited, "x-customer", "initech", "x-tenant-id", "someone-else")
	if st.Code() != codes.OK || remaining(t, h) != "93" {
		t.Fatalf("%v %v: want the function's cost, 7", st.Code(), h)
	}
	if st, _ := invoke(t, conn, grpctest.Limited, "x-tenant-id", "acme"); st.Code() != codes.Unauthenticated || st.Message() != adapterkit.MissingTenantBody.Message {
		t.Errorf("without x-customer: %v %q, want Unauthenticated", st.Code(), st.Message())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0] != grpctest.FullMethod(grpctest.UnaryService, grpctest.Limited) {
		t.Errorf("the cost function saw %q", seen)
	}

	// nil functions mean the defaults.
	conn = serve(t, l, tollgategrpc.WithTenant(nil), tollgategrpc.WithCostFunc(nil), tollgategrpc.WithSkip(nil))
	if st, h := invoke(t, conn, grpctest.Limited, "x-tenant-id", "globex"); st.Code() != codes.OK || remaining(t, h) != "99" {
		t.Errorf("defaults: %v %v", st.Code(), h)
	}
}

// TestMaxDelayKeepsToTheCallDeadline: a call whose turn comes after its
// deadline is refused at once, rather than held until the deadline ends
// it, and takes nothing; a call with room to wait is held and served.
func TestMaxDelayKeepsToTheCallDeadline(t *testing.T) {
	slow := tollgate.Plan{Name: "slow", Limit: tollgate.Limit{Rate: 2, Burst: 1}} // a token every 500ms
	l, err := tollgate.New(storetest.NewModelStore(time.Now), tollgate.SinglePlan(slow), tollgate.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, l, tollgategrpc.WithMaxDelay(time.Second, 0))
	call := func(timeout time.Duration) (codes.Code, time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "x-tenant-id", "t")
		began := time.Now()
		err := conn.Invoke(ctx, grpctest.FullMethod(grpctest.UnaryService, grpctest.Limited), wrapperspb.String("hi"), new(wrapperspb.StringValue))
		return status.Code(err), time.Since(began)
	}
	if code, _ := call(5 * time.Second); code != codes.OK {
		t.Fatalf("first call: %v", code)
	}
	if code, took := call(200 * time.Millisecond); code != codes.ResourceExhausted || took > 150*time.Millisecond {
		t.Fatalf("a call whose turn is 500ms away and deadline 200ms: %v after %v, want ResourceExhausted at once", code, took)
	}
	// The refused call took nothing: the next token is still the one
	// the first call left.
	if code, took := call(5 * time.Second); code != codes.OK || took > 700*time.Millisecond {
		t.Fatalf("a call with room to wait: %v after %v, want OK within the 500ms slot", code, took)
	}
}

// TestMetadataIsStructuredFields: every rate-limit value of an allowed and
// a refused call, in-flight policy included, parses with a parser of RFC
// 9651 structured fields that is not tollgate's.
func TestMetadataIsStructuredFields(t *testing.T) {
	plan := tollgate.Plan{Name: "plan", Limit: tollgate.Limit{Rate: 1, Burst: 1}, Policies: []tollgate.Policy{{InFlight: 2}}}
	l, _, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(plan))
	conn := grpctest.Serve(t, grpc.ChainUnaryInterceptor(tollgategrpc.UnaryServerInterceptor(l,
		tollgategrpc.WithPartitionKey([]byte("0123456789abcdef")))))
	for i, want := range []codes.Code{codes.OK, codes.ResourceExhausted} {
		st, md := invoke(t, conn, grpctest.Limited, "x-tenant-id", "acme")
		if st.Code() != want {
			t.Fatalf("call %d: %v, want %s", i, st, want)
		}
		for key, list := range map[string]bool{"ratelimit": true, "ratelimit-policy": true,
			"x-ratelimit-limit": false, "x-ratelimit-remaining": false, "x-ratelimit-reset": false, "retry-after": false} {
			v := md.Get(key)
			if len(v) == 0 {
				if key != "retry-after" || want != codes.OK {
					t.Errorf("call %d: no %s", i, key)
				}
				continue
			}
			var err error
			if list {
				_, err = httpsfv.UnmarshalList(v)
			} else {
				_, err = httpsfv.UnmarshalItem(v)
			}
			if err != nil {
				t.Errorf("call %d: %s %q: %v", i, key, v, err)
			}
		}
		if got := md.Get("ratelimit-policy"); len(got) != 1 || !strings.Contains(got[0], `qu="concurrent-requests"`) {
			t.Errorf("ratelimit-policy %q", got)
		}
		if got := md.Get("ratelimit"); len(got) != 1 || strings.Count(got[0], ";pk=:") != 2 {
			t.Errorf("ratelimit %q, want a partition key on both items", got)
		}
	}
}
