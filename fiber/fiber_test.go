package tollgatefiber_test

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adaptertest"
	tollgatefiber "github.com/tollgate-go/tollgate/fiber"
)

func ok(c *fiber.Ctx) error { return c.SendString("ok") }

func teapot(c *fiber.Ctx, d tollgate.Decision) error {
	return c.Status(fiber.StatusTeapot).JSON(fiber.Map{"denied": d.Tenant})
}

// serve runs app on a loopback listener until the test ends.
func serve(t *testing.T, app *fiber.App) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Listener(ln) }()
	t.Cleanup(func() {
		if err := app.ShutdownWithTimeout(5 * time.Second); err != nil {
			t.Error(err)
		}
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return "http://" + ln.Addr().String()
}

func newApp(cfg ...fiber.Config) *fiber.App {
	c := fiber.Config{}
	if len(cfg) > 0 {
		c = cfg[0]
	}
	c.DisableStartupMessage = true
	return fiber.New(c)
}

// TestConformance runs the kit with the middleware on each route.
func TestConformance(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, s adaptertest.Setup) string {
		limit := tollgatefiber.New(tollgatefiber.Config{
			Limiter: s.Limiter,
			Next:    func(c *fiber.Ctx) bool { return c.Path() == "/skipped" },
		})
		app := newApp()
		app.Get("/limited", limit, ok)
		app.Get("/skipped", limit, ok)
		app.Get("/costly", tollgatefiber.New(tollgatefiber.Config{Limiter: s.Limiter, Cost: 5}), ok)
		app.Get("/custom", tollgatefiber.New(tollgatefiber.Config{Limiter: s.Limiter, LimitReached: teapot}), ok)
		return serve(t, app)
	})
}

// TestConformanceUse runs the kit with one middleware for the whole app,
// registered with app.Use.
func TestConformanceUse(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, s adaptertest.Setup) string {
		app := newApp()
		app.Use(tollgatefiber.New(tollgatefiber.Config{
			Limiter: s.Limiter,
			Next:    func(c *fiber.Ctx) bool { return c.Path() == "/skipped" },
			CostFunc: func(c *fiber.Ctx) int64 {
				if c.Path() == "/costly" {
					return 5
				}
				return 0 // counts as 1
			},
			LimitReached: func(c *fiber.Ctx, d tollgate.Decision) error {
				if c.Path() == "/custom" {
					return teapot(c, d)
				}
				return c.Status(d.DenialStatus()).JSON(d.DenialBody())
			},
		}))
		for _, p := range []string{"/limited", "/skipped", "/costly", "/custom"} {
			app.Get(p, ok)
		}
		return serve(t, app)
	})
}

// newLimiter returns a limiter of burst requests per tenant, refilled at one
// a minute, that records its throttle events.
func newLimiter(t *testing.T, burst int64, opts ...tollgate.Option) (*tollgate.Limiter, *adaptertest.Events) {
	return newLimiterWith(t, tollgate.SinglePlan(tollgate.Plan{Name: "test", Limit: tollgate.PerMinute(1, burst)}), opts...)
}

func newLimiterWith(t *testing.T, plans tollgate.PlanResolver, opts ...tollgate.Option) (*tollgate.Limiter, *adaptertest.Events) {
	l, ev, _ := adaptertest.NewLimiter(t, plans, opts...)
	return l, ev
}

type principalKey struct{}

// auth stands in for an application's authentication middleware. It keeps
// in Locals a string that points into the request's buffer, as c.Get
// returns it, which Fiber reuses for the next request on the connection.
func auth(c *fiber.Ctx) error {
	if user, found := strings.CutPrefix(c.Get(fiber.HeaderAuthorization), "Bearer "); found {
		c.Locals(principalKey{}, user)
	}
	return c.Next()
}

func TestTenantFromLocals(t *testing.T) {
	l, ev := newLimiter(t, 2)
	app := newApp()
	app.Use(auth)
	app.Use(tollgatefiber.New(tollgatefiber.Config{Limiter: l, Tenant: tollgatefiber.TenantFromLocals(principalKey{})}))
	app.Get("/hello", ok)
	base := serve(t, app)

	// X-Tenant-ID is not the tenant here: spending another's budget with
	// it must not work.
	adaptertest.Drain(t, 2, "GET", base+"/hello", "Authorization", "Bearer alice", "X-Tenant-ID", "bob")
	if got := ev.Last(t).Tenant; got != "alice" {
		t.Errorf("event tenant %q, want alice", got)
	}
	if status, _ := adaptertest.Get(t, "GET", base+"/hello", "Authorization", "Bearer bob"); status != http.StatusOK {
		t.Errorf("bob: status %d, want 200 (a bucket of his own)", status)
	}
	if status, body := adaptertest.Get(t, "GET", base+"/hello"); status != http.StatusUnauthorized || !strings.Contains(body, tollgate.CodeMissingTenant) {
		t.Errorf("unauthenticated: status %d body %q, want 401 missing_tenant", status, body)
	}
}

// TestKeptStringsSurvive keeps the tenant and method of throttle events and
// of LimitReached's Decision, then sends more requests on the same
// connection, which reuse the buffers those strings were read from.
func TestKeptStringsSurvive(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tenant func(*fiber.Ctx) string
		header string
		value  func(tenant string) string
	}{
		{"header", tollgatefiber.TenantFromHeader("X-Tenant-ID"), "X-Tenant-ID", func(s string) string { return s }},
		{"locals", tollgatefiber.TenantFromLocals(principalKey{}), "Authorization", func(s string) string { return "Bearer " + s }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, ev := newLimiter(t, 1)
			var mu sync.Mutex
			var kept []string
			// A custom method, to check that the method is copied too.
			app := newApp(fiber.Config{RequestMethods: append(append([]string(nil), fiber.DefaultMethods...), "PURGE")})
			app.Use(auth)
			app.Use(tollgatefiber.New(tollgatefiber.Config{
				Limiter: l,
				Tenant:  tc.tenant,
				LimitReached: func(c *fiber.Ctx, d tollgate.Decision) error {
					mu.Lock()
					kept = append(kept, d.Tenant)
					mu.Unlock()
					return c.SendStatus(http.StatusTooManyRequests)
				},
			}))
			app.All("/hello", ok)
			base := serve(t, app)

			tenants := []string{"tenant-aaaa", "tenant-bbbb", "tenant-cccc", "tenant-dddd"}
			for _, tenant := range tenants {
				adaptertest.Drain(t, 1, "PURGE", base+"/hello", tc.header, tc.value(tenant))
			}
			// Overwrite the buffers once more with requests of the same
			// shape and length.
			for range 20 {
				adaptertest.Get(t, "PURGE", base+"/hello", tc.header, tc.value("tenant-zzzz"))
			}
			es := ev.All()
			if len(es) < len(tenants) {
				t.Fatalf("%d events, want at least %d", len(es), len(tenants))
			}
			for i, tenant := range tenants {
				if es[i].Tenant != tenant || es[i].Method != "PURGE" {
					t.Errorf("event %d: tenant %q method %q, want %q PURGE", i, es[i].Tenant, es[i].Method, tenant)
				}
				if kept[i] != tenant {
					t.Errorf("LimitReached decision %d: tenant %q, want %q", i, kept[i], tenant)
				}
			}
		})
	}
}

func TestTenantFromIP(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  fiber.Config
		want string
	}{
		// The peer is 127.0.0.1; the spoofed X-Forwarded-For must not
		// change its key unless the app trusts the peer.
		{"no proxy header", fiber.Config{}, "127.0.0.1"},
		{"untrusted peer", fiber.Config{
			ProxyHeader: fiber.HeaderXForwardedFor, EnableTrustedProxyCheck: true,
			TrustedProxies: []string{"10.0.0.1"}, EnableIPValidation: true,
		}, "127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, ev := newLimiter(t, 3)
			app := newApp(tc.cfg)
			app.Use(tollgatefiber.New(tollgatefiber.Config{Limiter: l, Tenant: tollgatefiber.TenantFromIP()}))
			app.Get("/hello", ok)
			base := serve(t, app)
			for i, spoof := range []string{"203.0.113.1", "203.0.113.2", "203.0.113.3"} {
				if status, _ := adaptertest.Get(t, "GET", base+"/hello", "X-Forwarded-For", spoof); status != http.StatusOK {
					t.Fatalf("request %d: status %d, want 200", i+1, status)
				}
			}
			if status, _ := adaptertest.Get(t, "GET", base+"/hello", "X-Forwarded-For", "203.0.113.4"); status != http.StatusTooManyRequests {
				t.Fatalf("4th request from the same peer: status %d, want 429", status)
			}
			if got := ev.Last(t).Tenant; got != tc.want {
				t.Errorf("tenant %q, want %q", got, tc.want)
			}
		})
	}

	t.Run("trusted proxy", func(t *testing.T) {
		l, ev := newLimiter(t, 1)
		app := newApp(fiber.Config{
			ProxyHeader: "X-Real-Ip", EnableTrustedProxyCheck: true,
			TrustedProxies: []string{"127.0.0.1"}, EnableIPValidation: true,
		})
		app.Use(tollgatefiber.New(tollgatefiber.Config{Limiter: l, Tenant: tollgatefiber.TenantFromIP()}))
		app.Get("/hello", ok)
		base := serve(t, app)
		adaptertest.Drain(t, 1, "GET", base+"/hello", "X-Real-IP", "203.0.113.1")
		if got := ev.Last(t).Tenant; got != "203.0.113.1" {
			t.Errorf("tenant %q, want 203.0.113.1", got)
		}
		adaptertest.Drain(t, 1, "GET", base+"/hello", "X-Real-IP", "2001:db8:1:2::5")
		if got := ev.Last(t).Tenant; got != "2001:db8:1:2::/64" {
			t.Errorf("IPv6 tenant %q, want its /64", got)
		}
	})
}

func TestTenantFromClientIP(t *testing.T) {
	t.Run("untrusted peer", func(t *testing.T) {
		l, ev := newLimiter(t, 3)
		app := newApp()
		app.Use(tollgatefiber.New(tollgatefiber.Config{Limiter: l,
			Tenant: tollgatefiber.TenantFromClientIP(netip.MustParsePrefix("10.0.0.0/8"))}))
		app.Get("/hello", ok)
		base := serve(t, app)
		for i, spoof := range []string{"203.0.113.1", "203.0.113.2", "203.0.113.3"} {
			if status, _ := adaptertest.Get(t, "GET", base+"/hello", "X-Forwarded-For", spoof, "X-Real-IP", spoof); status != http.StatusOK {
				t.Fatalf("request %d: status %d, want 200", i+1, status)
			}
		}
		if status, _ := adaptertest.Get(t, "GET", base+"/hello", "X-Forwarded-For", "203.0.113.4"); status != http.StatusTooManyRequests {
			t.Fatalf("4th request from the same peer: status %d, want 429", status)
		}
		if got := ev.Last(t).Tenant; got != "127.0.0.1" {
			t.Errorf("tenant %q, want 127.0.0.1", got)
		}
	})
	t.Run("trusted proxy", func(t *testing.T) {
		l, ev := newLimiter(t, 1)
		app := newApp()
		app.Use(tollgatefiber.New(tollgatefiber.Config{Limiter: l,
			Tenant: tollgatefiber.TenantFromClientIP(netip.MustParsePrefix("127.0.0.0/8"))}))
		app.Get("/hello", ok)
		base := serve(t, app)
		// The proxy appended the client's address to what the client
		// sent: the rightmost untrusted hop is the client.
		adaptertest.Drain(t, 1, "GET", base+"/hello", "X-Forwarded-For", "1.1.1.1, 203.0.113.1")
		if got := ev.Last(t).Tenant; got != "203.0.113.1" {
			t.Errorf("tenant %q, want 203.0.113.1", got)
		}
		adaptertest.Drain(t, 1, "GET", base+"/hello", "X-Real-IP", "203.0.113.2")
		if got := ev.Last(t).Tenant; got != "203.0.113.2" {
			t.Errorf("tenant %q from X-Real-IP, want 203.0.113.2", got)
		}
		adaptertest.Drain(t, 1, "GET", base+"/hello")
		if got := ev.Last(t).Tenant; got != "127.0.0.1" {
			t.Errorf("tenant %q without forwarding headers, want the proxy 127.0.0.1", got)
		}
	})
}

// TestRegistration registers the middleware on the app, a group and a
// single route, and checks where the limit applies and the route that
// throttle events report.
func TestRegistration(t *testing.T) {
	for _, tc := range []struct {
		name     string
		register func(app *fiber.App, mw fiber.Handler)
		path     string
		want     string
		free     string
	}{
		{
			name: "app Use",
			register: func(app *fiber.App, mw fiber.Handler) {
				app.Use(mw)
				app.Get("/api/users/:id", ok)
			},
			path: "/api/users/7", want: "/",
		},
		{
			name: "group",
			register: func(app *fiber.App, mw fiber.Handler) {
				app.Get("/healthz", ok)
				api := app.Group("/api", mw)
				api.Get("/users/:id", ok)
			},
			path: "/api/users/7", want: "/api", free: "/healthz",
		},
		{
			name: "single route in a group",
			register: func(app *fiber.App, mw fiber.Handler) {
				api := app.Group("/api")
				api.Get("/users/:id", mw, ok)
				api.Get("/users", ok)
			},
			path: "/api/users/7", want: "/api/users/:id", free: "/api/users",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, ev := newLimiter(t, 2)
			app := newApp()
			tc.register(app, tollgatefiber.New(tollgatefiber.Config{Limiter: l}))
			base := serve(t, app)
			adaptertest.Drain(t, 2, "GET", base+tc.path, "X-Tenant-ID", "acme")
			e := ev.Last(t)
			if e.Route != tc.want || e.Method != "GET" || e.Tenant != "acme" {
				t.Errorf("event route %q method %q tenant %q, want %q GET acme", e.Route, e.Method, e.Tenant, tc.want)
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

func TestPerRouteCost(t *testing.T) {
	l, ev := newLimiter(t, 25)
	app := newApp()
	app.Get("/api/hello", tollgatefiber.New(tollgatefiber.Config{Limiter: l}), ok)
	app.Post("/api/reports", tollgatefiber.New(tollgatefiber.Config{Limiter: l, Cost: 10}), ok)
	base := serve(t, app)
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		if status, _ := adaptertest.Get(t, "POST", base+"/api/reports", "X-Tenant-ID", "acme"); status != want {
			t.Fatalf("report %d: status %d, want %d", i+1, status, want)
		}
	}
	e := ev.Last(t)
	if e.Cost != 10 || e.Route != "/api/reports" || e.Method != "POST" {
		t.Errorf("event cost %d route %q method %q, want 10 /api/reports POST", e.Cost, e.Route, e.Method)
	}
	adaptertest.Drain(t, 5, "GET", base+"/api/hello", "X-Tenant-ID", "acme")
}

func TestMissingTenantHandler(t *testing.T) {
	l, _ := newLimiter(t, 1)
	app := newApp()
	app.Use(tollgatefiber.New(tollgatefiber.Config{Limiter: l,
		MissingTenant: func(c *fiber.Ctx) error { return c.Next() }, // anonymous requests pass
	}))
	app.Get("/hello", ok)
	base := serve(t, app)
	for range 3 {
		if status, _ := adaptertest.Get(t, "GET", base+"/hello"); status != http.StatusOK {
			t.Fatalf("anonymous request: status %d, want 200", status)
		}
	}
}

type ctxKey struct{}

// TestUserContext checks that the Limiter sees the request's user context,
// which carries the application's deadlines and values.
func TestUserContext(t *testing.T) {
	var mu sync.Mutex
	var seen []any
	plans := tollgate.PlanResolverFunc(func(ctx context.Context, _ string) (tollgate.Plan, error) {
		mu.Lock()
		seen = append(seen, ctx.Value(ctxKey{}))
		mu.Unlock()
		return tollgate.Free, nil
	})
	l, _ := newLimiterWith(t, plans)
	app := newApp()
	app.Use(func(c *fiber.Ctx) error {
		c.SetUserContext(context.WithValue(c.UserContext(), ctxKey{}, "request-42"))
		return c.Next()
	})
	app.Use(tollgatefiber.New(tollgatefiber.Config{Limiter: l}))
	app.Get("/hello", ok)
	base := serve(t, app)
	adaptertest.Get(t, "GET", base+"/hello", "X-Tenant-ID", "acme")
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0] != "request-42" {
		t.Errorf("resolver saw context values %v, want [request-42]", seen)
	}
}

func TestNilLimiter(t *testing.T) {
	for _, cfg := range [][]tollgatefiber.Config{nil, {{}}} {
		app := newApp()
		app.Use(tollgatefiber.New(cfg...))
		app.Get("/hello", ok)
		base := serve(t, app)
		status, body := adaptertest.Get(t, "GET", base+"/hello", "X-Tenant-ID", "acme")
		if status != http.StatusInternalServerError || !strings.Contains(body, tollgate.CodeInternalError) {
			t.Errorf("status %d body %q, want 500 internal_error", status, body)
		}
	}
}
