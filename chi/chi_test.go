package tollgatechi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	tollgatechi "github.com/tollgate-go/tollgate/chi"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adaptertest"
)

func ok(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) }

func teapot(w http.ResponseWriter, _ *http.Request, d tollgate.Decision) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusTeapot)
	w.Write([]byte(`{"denied":"` + d.Tenant + `"}`))
}

func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestConformance runs the kit with the middleware on each route, as
// r.With registers it.
func TestConformance(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, s adaptertest.Setup) string {
		limit := tollgatechi.Middleware(s.Limiter, tollgate.WithSkip(func(r *http.Request) bool {
			return r.URL.Path == "/skipped"
		}))
		r := chi.NewRouter()
		r.With(limit).Get("/limited", ok)
		r.With(limit).Get("/skipped", ok)
		r.With(tollgatechi.Middleware(s.Limiter, tollgate.WithCost(5))).Get("/costly", ok)
		r.With(tollgatechi.Middleware(s.Limiter, tollgate.WithDenyHandler(teapot))).Get("/custom", ok)
		return serve(t, r)
	})
}

// TestConformanceUse runs the kit with one middleware for the whole router,
// registered with r.Use before chi routes: costs and the custom denial then
// go by the route pattern.
func TestConformanceUse(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, s adaptertest.Setup) string {
		r := chi.NewRouter()
		r.Use(tollgatechi.Middleware(s.Limiter,
			tollgate.WithSkip(func(r *http.Request) bool { return r.URL.Path == "/skipped" }),
			tollgate.WithCostFunc(func(r *http.Request) int64 {
				if tollgatechi.RoutePattern(r) == "/costly" {
					return 5
				}
				return 1
			}),
			tollgate.WithDenyHandler(func(w http.ResponseWriter, r *http.Request, d tollgate.Decision) {
				if tollgatechi.RoutePattern(r) == "/custom" {
					teapot(w, r, d)
					return
				}
				tollgate.WriteJSON(w, d.DenialStatus(), d.DenialBody())
			}),
		))
		for _, p := range []string{"/limited", "/skipped", "/costly", "/custom"} {
			r.Get(p, ok)
		}
		return serve(t, r)
	})
}

// newLimiter returns a limiter of burst requests per tenant, refilled at one
// a minute, that records its throttle events.
func newLimiter(t *testing.T, burst int64) (*tollgate.Limiter, *adaptertest.Events) {
	l, ev, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(tollgate.Plan{Name: "test", Limit: tollgate.PerMinute(1, burst)}))
	return l, ev
}

type principalKey struct{}

// auth stands in for an application's authentication middleware.
func auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user := r.Header.Get("Authorization"); strings.HasPrefix(user, "Bearer ") {
			// The tenant comes from the credential, never from a header the
			// client can set freely.
			tenant := "tenant-of-" + strings.TrimPrefix(user, "Bearer ")
			r = r.WithContext(context.WithValue(r.Context(), principalKey{}, tenant))
		}
		next.ServeHTTP(w, r)
	})
}

func TestTenantFromContext(t *testing.T) {
	l, ev := newLimiter(t, 2)
	r := chi.NewRouter()
	r.Use(auth)
	r.Use(tollgatechi.Middleware(l, tollgate.WithTenant(tollgate.TenantFromContext(principalKey{}))))
	r.Get("/hello", ok)
	base := serve(t, r)

	// X-Tenant-ID is not the tenant here: spending another's budget with it
	// must not work.
	adaptertest.Drain(t, 2, "GET", base+"/hello", "Authorization", "Bearer alice", "X-Tenant-ID", "bob")
	if got := ev.Last(t).Tenant; got != "tenant-of-alice" {
		t.Errorf("event tenant %q, want tenant-of-alice", got)
	}
	if status, _ := adaptertest.Get(t, "GET", base+"/hello", "Authorization", "Bearer bob"); status != http.StatusOK {
		t.Errorf("bob: status %d, want 200 (a bucket of his own)", status)
	}
	if status, body := adaptertest.Get(t, "GET", base+"/hello"); status != http.StatusUnauthorized || !strings.Contains(body, tollgate.CodeMissingTenant) {
		t.Errorf("unauthenticated: status %d body %q, want 401 missing_tenant", status, body)
	}
}

func TestTenantFromClientIP(t *testing.T) {
	for _, tc := range []struct {
		name    string
		trusted []netip.Prefix
		want    string // the tenant key of every request
	}{
		// The peer, 127.0.0.1, is not trusted: its X-Forwarded-For is a
		// lie it could change on every request to get fresh buckets.
		{"untrusted peer", nil, "127.0.0.1"},
		{"other proxy trusted", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, "127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, ev := newLimiter(t, 3)
			r := chi.NewRouter()
			r.Use(tollgatechi.Middleware(l, tollgate.WithTenant(tollgate.TenantFromClientIP(tc.trusted...))))
			r.Get("/hello", ok)
			base := serve(t, r)
			for i, spoof := range []string{"203.0.113.1", "203.0.113.2", "203.0.113.3, 198.51.100.1"} {
				if status, _ := adaptertest.Get(t, "GET", base+"/hello", "X-Forwarded-For", spoof, "X-Real-IP", spoof); status != http.StatusOK {
					t.Fatalf("request %d: status %d, want 200", i+1, status)
				}
			}
			if status, _ := adaptertest.Get(t, "GET", base+"/hello", "X-Forwarded-For", "203.0.113.4"); status != http.StatusTooManyRequests {
				t.Fatalf("4th request from the same peer with a new X-Forwarded-For: status %d, want 429", status)
			}
			if got := ev.Last(t).Tenant; got != tc.want {
				t.Errorf("tenant %q, want %q", got, tc.want)
			}
		})
	}

	t.Run("trusted proxy", func(t *testing.T) {
		l, ev := newLimiter(t, 1)
		r := chi.NewRouter()
		r.Use(tollgatechi.Middleware(l, tollgate.WithTenant(tollgate.TenantFromClientIP(netip.MustParsePrefix("127.0.0.0/8")))))
		r.Get("/hello", ok)
		base := serve(t, r)
		// Behind a trusted proxy, each client has its own bucket; the
		// proxy appended the client's address to what the client sent.
		adaptertest.Drain(t, 1, "GET", base+"/hello", "X-Forwarded-For", "1.1.1.1, 203.0.113.1")
		if got := ev.Last(t).Tenant; got != "203.0.113.1" {
			t.Errorf("tenant %q, want the rightmost untrusted hop 203.0.113.1", got)
		}
		adaptertest.Drain(t, 1, "GET", base+"/hello", "X-Forwarded-For", "203.0.113.2")
		adaptertest.Drain(t, 1, "GET", base+"/hello", "X-Forwarded-For", "2001:db8:1:2::5")
		if got := ev.Last(t).Tenant; got != "2001:db8:1:2::/64" {
			t.Errorf("IPv6 tenant %q, want its /64", got)
		}
	})
}

// TestRoutePatterns registers the middleware in each way chi allows and
// checks the route that throttle events report, and that the limit applies
// where it is registered and nowhere else.
func TestRoutePatterns(t *testing.T) {
	type reg func(r chi.Router, mw func(http.Handler) http.Handler)
	users := func(r chi.Router) {
		r.Get("/users/{id}", ok)
		r.Get("/files/*", ok)
	}
	for _, tc := range []struct {
		name     string
		register reg
		path     string // requested
		want     string // reported route
		free     string // a path the limit must not apply to, if any
	}{
		{
			name: "router Use",
			register: func(r chi.Router, mw func(http.Handler) http.Handler) {
				r.Use(mw)
				users(r)
			},
			path: "/users/42", want: "/users/{id}",
		},
		{
			name: "router Use, wildcard",
			register: func(r chi.Router, mw func(http.Handler) http.Handler) {
				r.Use(mw)
				users(r)
			},
			path: "/files/a/b.txt", want: "/files/*",
		},
		{
			name: "router Use, no route",
			register: func(r chi.Router, mw func(http.Handler) http.Handler) {
				r.Use(mw)
				users(r)
			},
			path: "/nowhere/42", want: "",
		},
		{
			name: "sub-router Use",
			register: func(r chi.Router, mw func(http.Handler) http.Handler) {
				r.Get("/healthz", ok)
				r.Route("/api", func(r chi.Router) {
					r.Use(mw)
					r.Route("/v1", users)
				})
			},
			path: "/api/v1/users/42", want: "/api/v1/users/{id}", free: "/healthz",
		},
		{
			name: "mounted router, Use above it",
			register: func(r chi.Router, mw func(http.Handler) http.Handler) {
				r.Use(mw)
				sub := chi.NewRouter()
				users(sub)
				r.Mount("/api", sub)
			},
			path: "/api/files/x", want: "/api/files/*",
		},
		{
			name: "group",
			register: func(r chi.Router, mw func(http.Handler) http.Handler) {
				r.Get("/healthz", ok)
				r.Route("/api", func(r chi.Router) {
					r.Group(func(r chi.Router) {
						r.Use(mw)
						users(r)
					})
				})
			},
			path: "/api/users/7", want: "/api/users/{id}", free: "/healthz",
		},
		{
			name: "single route",
			register: func(r chi.Router, mw func(http.Handler) http.Handler) {
				r.Route("/api", func(r chi.Router) {
					r.With(mw).Get("/users/{id}", ok)
					r.Get("/users", ok)
				})
			},
			path: "/api/users/7", want: "/api/users/{id}", free: "/api/users",
		},
		{
			name: "single wildcard route",
			register: func(r chi.Router, mw func(http.Handler) http.Handler) {
				r.Route("/api", func(r chi.Router) {
					r.With(mw).Get("/files/*", ok)
				})
			},
			path: "/api/files/x/y", want: "/api/files/*",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, ev := newLimiter(t, 2)
			r := chi.NewRouter()
			r.NotFound(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) })
			tc.register(r, tollgatechi.Middleware(l))
			base := serve(t, r)
			adaptertest.Drain(t, 2, "GET", base+tc.path, "X-Tenant-ID", "acme")
			e := ev.Last(t)
			if e.Route != tc.want || e.Method != "GET" || e.Tenant != "acme" {
				t.Errorf("event route %q method %q tenant %q, want %q GET acme", e.Route, e.Method, e.Tenant, tc.want)
			}
			if tc.free != "" {
				for i := 0; i < 5; i++ {
					if status, _ := adaptertest.Get(t, "GET", base+tc.free, "X-Tenant-ID", "acme"); status != http.StatusOK {
						t.Fatalf("%s is not limited, got status %d", tc.free, status)
					}
				}
			}
		})
	}
}

func TestPerRouteCost(t *testing.T) {
	l, ev := newLimiter(t, 25)
	r := chi.NewRouter()
	r.Route("/api", func(r chi.Router) {
		r.Use(tollgatechi.Middleware(l))
		r.Get("/hello", ok)
		r.With(tollgatechi.Middleware(l, tollgate.WithCost(10))).Post("/reports", ok)
	})
	base := serve(t, r)
	// Both middlewares take from the same bucket: a report costs 1 + 10.
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		if status, _ := adaptertest.Get(t, "POST", base+"/api/reports", "X-Tenant-ID", "acme"); status != want {
			t.Fatalf("report %d: status %d, want %d", i+1, status, want)
		}
	}
	e := ev.Last(t)
	if e.Cost != 10 || e.Route != "/api/reports" || e.Method != "POST" {
		t.Errorf("event cost %d route %q method %q, want 10 /api/reports POST", e.Cost, e.Route, e.Method)
	}
	// 2 of 25 tokens are left (the outer middleware took one for the
	// denied report before the inner one denied it): two cheap requests.
	adaptertest.Drain(t, 2, "GET", base+"/api/hello", "X-Tenant-ID", "acme")
}

func TestNilLimiter(t *testing.T) {
	r := chi.NewRouter()
	r.Use(tollgatechi.Middleware(nil))
	r.Get("/hello", ok)
	base := serve(t, r)
	status, body := adaptertest.Get(t, "GET", base+"/hello", "X-Tenant-ID", "acme")
	if status != http.StatusInternalServerError || !strings.Contains(body, tollgate.CodeInternalError) {
		t.Errorf("status %d body %q, want 500 internal_error", status, body)
	}
}

func TestRoutePatternOutsideChi(t *testing.T) {
	mux := http.NewServeMux()
	var got string
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) { got = tollgatechi.RoutePattern(r) })
	mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/items/3", nil))
	if got != "GET /items/{id}" {
		t.Errorf("RoutePattern = %q, want the ServeMux pattern", got)
	}
}
