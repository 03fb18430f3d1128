package tollgatehttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adaptertest"
	"github.com/tollgate-go/tollgate/core/storetest"
	"github.com/tollgate-go/tollgate/core/tollgatehttp"
)

func ok(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) }

var free = tollgate.DefaultPlans()[0]

func TestMiddlewareConformance(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, s adaptertest.Setup) string {
		byTenant := tollgatehttp.WithTenant(tollgatehttp.TenantFromContext(adaptertest.TenantKey{}))
		limit := tollgatehttp.Middleware(s.Limiter, byTenant, tollgatehttp.WithSkip(func(r *http.Request) bool {
			return r.URL.Path == "/skipped"
		}))
		costly := tollgatehttp.Middleware(s.Limiter, byTenant, tollgatehttp.WithCost(5))
		reports := tollgatehttp.Middleware(s.Limiter, byTenant, tollgatehttp.WithBudget(s.Budget))
		custom := tollgatehttp.Middleware(s.Limiter, byTenant, tollgatehttp.WithDenyHandler(
			func(w http.ResponseWriter, r *http.Request, d tollgate.Decision) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusTeapot)
				w.Write([]byte(`{"denied":"` + d.Tenant + `"}`))
			}))
		public := tollgatehttp.Middleware(s.Limiter, byTenant, tollgatehttp.WithMissingTenantHandler(http.HandlerFunc(ok)))
		byHeader := tollgatehttp.Middleware(s.Limiter)
		held := tollgatehttp.Middleware(s.Limiter, byTenant, tollgatehttp.WithMaxDelay(adaptertest.HeldDelay, 0))
		slow := tollgatehttp.Middleware(s.Limiter, byTenant)
		slowHeld := tollgatehttp.Middleware(s.Limiter, byTenant, tollgatehttp.WithMaxDelay(adaptertest.SlotDelay, 0))
		mux := http.NewServeMux()
		mux.Handle("GET /limited", limit(http.HandlerFunc(ok)))
		mux.Handle("GET /skipped", limit(http.HandlerFunc(ok)))
		mux.Handle("GET /costly", costly(http.HandlerFunc(ok)))
		mux.Handle("GET /custom", custom(http.HandlerFunc(ok)))
		mux.Handle("GET /public", public(http.HandlerFunc(ok)))
		mux.Handle("GET /reports/{id}", reports(http.HandlerFunc(ok)))
		mux.Handle("GET /by-header", byHeader(http.HandlerFunc(ok)))
		mux.Handle("GET /held", held(http.HandlerFunc(ok)))
		mux.Handle("GET /slow", slow(adaptertest.SlowHandler(s)))
		mux.Handle("GET /slow-held", slowHeld(adaptertest.SlowHandler(s)))
		srv := httptest.NewServer(adaptertest.Authenticate(mux, func(r *http.Request, tenant string) *http.Request {
			return r.WithContext(context.WithValue(r.Context(), adaptertest.TenantKey{}, tenant))
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	})
}

func TestMiddlewareClientIP(t *testing.T) {
	adaptertest.RunClientIP(t, func(t *testing.T, l *tollgate.Limiter, trusted []netip.Prefix) string {
		mux := http.NewServeMux()
		mux.Handle("GET /ip", tollgatehttp.Middleware(l, tollgatehttp.WithTenant(tollgatehttp.TenantFromClientIP(trusted...)))(http.HandlerFunc(ok)))
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		return srv.URL
	})
}

// TestMiddlewareRoute: the route is the ServeMux pattern by default, or
// what WithRoute says, worked out once a request.
func TestMiddlewareRoute(t *testing.T) {
	l, events, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(tollgate.Plan{Name: "p", Limit: tollgate.Limit{Rate: 1, Burst: 1}}))
	calls := 0
	named := tollgatehttp.Middleware(l, tollgatehttp.WithRoute(func(r *http.Request) string { calls++; return "/named/{id}" }))
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", tollgatehttp.Middleware(l)(http.HandlerFunc(ok)))
	mux.Handle("GET /named/{id}", named(http.HandlerFunc(ok)))
	for _, tc := range []struct{ path, tenant, want string }{
		{"/items/42", "a", "GET /items/{id}"},
		{"/named/42", "b", "/named/{id}"},
	} {
		for range 2 {
			req := httptest.NewRequest(http.MethodGet, tc.path, nil)
			req.Header.Set(tollgatehttp.DefaultTenantHeader, tc.tenant)
			mux.ServeHTTP(httptest.NewRecorder(), req)
		}
		if e := events.Last(t); e.Route != tc.want || e.Tenant != tc.tenant {
			t.Errorf("%s: throttled on route %q, want %q", tc.path, e.Route, tc.want)
		}
	}
	if calls != 2 {
		t.Errorf("the route function ran %d times for 2 requests", calls)
	}
}

// TestWriteDenial: a deny handler can fall back on the default answer.
func TestWriteDenial(t *testing.T) {
	l, _, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(tollgate.Plan{Name: "p", Limit: tollgate.Limit{Rate: 1, Burst: 1}}))
	h := tollgatehttp.Middleware(l, tollgatehttp.WithDenyHandler(func(w http.ResponseWriter, r *http.Request, d tollgate.Decision) {
		w.Header().Set("X-Seen", "yes")
		tollgatehttp.WriteDenial(w, r, d)
	}))(http.HandlerFunc(ok))
	var w *httptest.ResponseRecorder
	for range 2 {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set(tollgatehttp.DefaultTenantHeader, "t")
		w = httptest.NewRecorder()
		h.ServeHTTP(w, req)
	}
	want := `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",` +
		`"title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,` +
		`"detail":"rate limit exceeded (p): retry in 1s","violated-policies":["p"],` +
		`"error":"rate_limited","message":"rate limit exceeded (p): retry in 1s","retry_after":1,"policy":"p"}` + "\n"
	if w.Code != http.StatusTooManyRequests || w.Body.String() != want || w.Header().Get("X-Seen") != "yes" ||
		w.Header().Get("Retry-After") != "1" || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Errorf("%d %q %v, want 429 %q with the handler's header and Retry-After", w.Code, w.Body.String(), w.Header(), want)
	}
}

// TestInvalidPlanFromAResolver: a resolver that makes up an invalid plan
// gets a configuration error, which middleware answers 500, never a panic
// or a broken header.
func TestInvalidPlanFromAResolver(t *testing.T) {
	for _, name := range []string{"", strings.Repeat("p", 65), "caf\u00e9", "a\nb", "tab\there", `pro "plus"`, `back\slash`, "a,b", "semi;colon", "sp ace"} {
		if err := (tollgate.Plan{Name: name, Limit: free.Limit}).Validate(); err == nil {
			t.Errorf("plan name %q accepted", name)
		}
	}
	l, err := tollgate.New(storetest.NewModelStore(time.Now), tollgate.PlanResolverFunc(
		func(context.Context, string) (tollgate.Plan, error) {
			return tollgate.Plan{Name: strings.Repeat(`"`, 150), Limit: free.Limit}, nil
		}), tollgate.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	h := tollgatehttp.Middleware(l)(http.HandlerFunc(ok))
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set(tollgatehttp.DefaultTenantHeader, "t")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusInternalServerError || rec.Header().Get("RateLimit") != "" {
		t.Errorf("invalid plan from a resolver: status %d, headers %v", rec.Code, rec.Header())
	}
}

type recorder struct {
	header http.Header
	status int
}

func newRecorder() *recorder                          { return &recorder{header: http.Header{}} }
func (r *recorder) Header() http.Header               { return r.header }
func (r *recorder) WriteHeader(status int)            { r.status = status }
func (r *recorder) Write(p []byte) (int, error)       { return len(p), nil }
func (r *recorder) WriteString(s string) (int, error) { return len(s), nil }

// FuzzTenant sends any tenant ID and plan name through the middleware: it
// never panics, answers 200, 429, 400 (for every tenant ID with a control
// byte) or 401 (a 500 only for a plan the resolver gets wrong), and every
// header value it writes is printable ASCII.
func FuzzTenant(f *testing.F) {
	f.Add("acme", "free", int64(1))
	f.Add("", "free", int64(1))
	f.Add(strings.Repeat("\xff", 300), `"`, int64(0))
	f.Add("{t}\x00\r\n", "a/b:c+d", int64(25))
	clock := storetest.NewClock()
	store := storetest.NewModelStore(clock.Now)
	f.Fuzz(func(t *testing.T, tenant, planName string, cost int64) {
		plan := tollgate.Plan{Name: planName, Limit: free.Limit, Policies: []tollgate.Policy{{Quota: tollgate.Quota{Tokens: 100, Period: tollgate.Daily}}}}
		l, err := tollgate.New(store, tollgate.SinglePlan(plan), tollgate.WithLogger(nil), adaptertest.WithClock(clock.Now))
		if err != nil {
			if plan.Validate() == nil {
				t.Fatal(err)
			}
			return // New refuses an invalid plan of SinglePlan
		}
		h := tollgatehttp.Middleware(l,
			tollgatehttp.WithTenant(func(*http.Request) string { return tenant }),
			tollgatehttp.WithCost(cost))(http.HandlerFunc(ok))
		rec := newRecorder()
		h.ServeHTTP(rec, &http.Request{Method: http.MethodGet, Header: http.Header{}})
		if strings.ContainsFunc(tenant, func(r rune) bool { return r < 0x20 || r == 0x7f }) && rec.status != http.StatusBadRequest {
			t.Fatalf("tenant %q with a control byte: status %d, want 400", tenant, rec.status)
		}
		switch rec.status {
		case 0, http.StatusOK, http.StatusTooManyRequests, http.StatusBadRequest, http.StatusUnauthorized:
		case http.StatusInternalServerError:
			if cost <= free.Limit.Burst {
				t.Fatalf("500 for a valid plan %q and cost %d", planName, cost)
			}
		default:
			t.Fatalf("status %d", rec.status)
		}
		for k, vs := range rec.header {
			for _, v := range vs {
				for i := 0; i < len(v); i++ {
					if c := v[i]; c < 0x20 || c > 0x7e {
						t.Fatalf("%s value %q has byte %#x", k, v, c)
					}
				}
			}
		}
	})
}
