package tollgatechi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/dunglas/httpsfv"
	"github.com/go-chi/chi/v5"

	tollgatechi "github.com/tollgate-go/tollgate/chi"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adaptertest"
	"github.com/tollgate-go/tollgate/core/tollgatehttp"
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

// authenticate is the kit's authentication: chi keeps request values in
// the request context.
func authenticate(next http.Handler) http.Handler {
	return adaptertest.Authenticate(next, func(r *http.Request, tenant string) *http.Request {
		return r.WithContext(context.WithValue(r.Context(), adaptertest.TenantKey{}, tenant))
	})
}

var byTenant = tollgatehttp.WithTenant(tollgatehttp.TenantFromContext(adaptertest.TenantKey{}))

// fields parses header values with a parser of structured fields that is
// not tollgate's.
var fields = adaptertest.FieldParsers{
	List: func(v string) error { _, err := httpsfv.UnmarshalList([]string{v}); return err },
	Item: func(v string) error { _, err := httpsfv.UnmarshalItem([]string{v}); return err },
}

// TestConformance runs the kit with the middleware on each route, as
// r.With registers it.
func TestConformance(t *testing.T) {
	adaptertest.RunWith(t, func(t *testing.T, s adaptertest.Setup) string {
		limit := tollgatechi.Middleware(s.Limiter, byTenant, tollgatehttp.WithSkip(func(r *http.Request) bool {
			return r.URL.Path == "/skipped"
		}))
		r := chi.NewRouter()
		r.Use(authenticate)
		r.With(limit).Get("/limited", ok)
		r.With(limit).Get("/skipped", ok)
		r.With(tollgatechi.Middleware(s.Limiter, tollgatehttp.WithCost(5), byTenant)).Get("/costly", ok)
		r.With(tollgatechi.Middleware(s.Limiter, byTenant, tollgatehttp.WithDenyHandler(teapot))).Get("/custom", ok)
		r.With(tollgatechi.Middleware(s.Limiter, byTenant, tollgatehttp.WithMissingTenantHandler(http.HandlerFunc(ok)))).Get("/public", ok)
		r.With(tollgatechi.Middleware(s.Limiter, tollgatehttp.WithBudget(s.Budget), byTenant)).Get("/reports/{id}", ok)
		r.With(tollgatechi.Middleware(s.Limiter)).Get("/by-header", ok)
		r.With(tollgatechi.Middleware(s.Limiter, byTenant, tollgatehttp.WithMaxDelay(adaptertest.HeldDelay, 0))).Get("/held", ok)
		r.With(tollgatechi.Middleware(s.Limiter, byTenant)).Get("/slow", adaptertest.SlowHandler(s).ServeHTTP)
		r.With(tollgatechi.Middleware(s.Limiter, byTenant, tollgatehttp.WithMaxDelay(adaptertest.SlotDelay, 0))).
			Get("/slow-held", adaptertest.SlowHandler(s).ServeHTTP)
		return serve(t, r)
	}, fields)
}

// TestConformanceUse runs the kit with the middleware registered with Use,
// before chi routes: one for the router, which goes by the route pattern
// for costs and the custom denial, and one for the reports sub-router with
// its budget. The route that throttled decisions name is the full pattern
// all the same.
func TestConformanceUse(t *testing.T) {
	adaptertest.RunWith(t, func(t *testing.T, s adaptertest.Setup) string {
		r := chi.NewRouter()
		r.Use(authenticate)
		r.Use(tollgatechi.Middleware(s.Limiter, byTenant,
			tollgatehttp.WithSkip(func(r *http.Request) bool {
				// The reports, public, by-header and held routes
				// have middleware of their own.
				p := tollgatechi.RoutePattern(r)
				return p == "/skipped" || p == "/public" || p == "/by-header" || p == "/held" || p == "/slow-held" ||
					strings.HasPrefix(p, "/reports/")
			}),
			tollgatehttp.WithCostFunc(func(r *http.Request) int64 {
				if tollgatechi.RoutePattern(r) == "/costly" {
					return 5
				}
				return 1
			}),
			tollgatehttp.WithDenyHandler(func(w http.ResponseWriter, r *http.Request, d tollgate.Decision) {
				if tollgatechi.RoutePattern(r) == "/custom" {
					teapot(w, r, d)
					return
				}
				tollgatehttp.WriteDenial(w, r, d)
			}),
		))
		for _, p := range []string{"/limited", "/skipped", "/costly", "/custom"} {
			r.Get(p, ok)
		}
		r.Get("/slow", adaptertest.SlowHandler(s).ServeHTTP)
		r.Route("/reports", func(r chi.Router) {
			r.Use(tollgatechi.Middleware(s.Limiter, byTenant, tollgatehttp.WithBudget(s.Budget)))
			r.Get("/{id}", ok)
		})
		r.Group(func(r chi.Router) {
			r.Use(tollgatechi.Middleware(s.Limiter))
			r.Get("/by-header", ok)
		})
		r.Group(func(r chi.Router) {
			r.Use(tollgatechi.Middleware(s.Limiter, byTenant, tollgatehttp.WithMissingTenantHandler(http.HandlerFunc(ok))))
			r.Get("/public", ok)
		})
		r.Group(func(r chi.Router) {
			r.Use(tollgatechi.Middleware(s.Limiter, byTenant, tollgatehttp.WithMaxDelay(adaptertest.HeldDelay, 0)))
			r.Get("/held", ok)
		})
		r.Group(func(r chi.Router) {
			r.Use(tollgatechi.Middleware(s.Limiter, byTenant, tollgatehttp.WithMaxDelay(adaptertest.SlotDelay, 0)))
			r.Get("/slow-held", adaptertest.SlowHandler(s).ServeHTTP)
		})
		return serve(t, r)
	}, fields)
}

func TestClientIP(t *testing.T) {
	adaptertest.RunClientIP(t, func(t *testing.T, l *tollgate.Limiter, trusted []netip.Prefix) string {
		r := chi.NewRouter()
		r.Use(tollgatechi.Middleware(l, tollgatehttp.WithTenant(tollgatehttp.TenantFromClientIP(trusted...))))
		r.Get("/ip", ok)
		return serve(t, r)
	})
}

// TestRoutePatterns registers the middleware in each way chi allows and
// checks the route that throttled decisions report, and that the limit applies
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
			name: "router Use, static route",
			register: func(r chi.Router, mw func(http.Handler) http.Handler) {
				r.Use(mw)
				users(r)
				r.Get("/users/me", ok)
			},
			path: "/users/me", want: "/users/me",
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
			plan := tollgate.Plan{Name: "two", Limit: tollgate.Limit{Rate: 1.0 / 60, Burst: 2}}
			l, ev, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(plan))
			r := chi.NewRouter()
			r.NotFound(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) })
			tc.register(r, tollgatechi.Middleware(l))
			base := serve(t, r)
			adaptertest.Drain(t, 2, "GET", base+tc.path, "X-Tenant-ID", "acme")
			e := ev.Last(t)
			if e.Route != tc.want || e.Method != "GET" || e.Tenant != "acme" {
				t.Errorf("throttled on route %q method %q tenant %q, want %q GET acme", e.Route, e.Method, e.Tenant, tc.want)
			}
			if tc.free != "" {
				for range 5 {
					if status, _ := adaptertest.Get(t, "GET", base+tc.free, "X-Tenant-ID", "acme"); status != http.StatusOK {
						t.Fatalf("%s is not limited, got status %d", tc.free, status)
					}
				}
			}
		})
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

// TestMiddlewareSharedByTwoRouters: the middleware remembers the static
// routes of one router, and still names the routes of another by its own
// patterns.
func TestMiddlewareSharedByTwoRouters(t *testing.T) {
	plan := tollgate.Plan{Name: "one", Limit: tollgate.Limit{Rate: 1.0 / 60, Burst: 1}}
	l, ev, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(plan))
	mw := tollgatechi.Middleware(l)
	a, b := chi.NewRouter(), chi.NewRouter()
	a.Use(mw)
	a.Get("/users/me", ok)
	b.Use(mw)
	b.Get("/users/{id}", ok)
	for i, tc := range []struct {
		router *chi.Mux
		want   string
	}{{a, "/users/me"}, {a, "/users/me"}, {b, "/users/{id}"}, {a, "/users/me"}, {b, "/users/{id}"}} {
		tenant := "t" + string(rune('0'+i))
		adaptertest.Serve(tc.router, "GET", "/users/me", "", "X-Tenant-ID", tenant)
		adaptertest.Serve(tc.router, "GET", "/users/me", "", "X-Tenant-ID", tenant)
		if e := ev.Last(t); e.Route != tc.want || e.Tenant != tenant {
			t.Errorf("request %d: throttled %q on route %q, want %q", i, e.Tenant, e.Route, tc.want)
		}
	}
}
