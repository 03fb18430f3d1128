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

	"github.com/dunglas/httpsfv"
	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/recover"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adapterkit"
	"github.com/tollgate-go/tollgate/core/adaptertest"
	tollgatefiber "github.com/tollgate-go/tollgate/fiber"
)

func ok(c *fiber.Ctx) error { return c.SendString("ok") }

// next is the kit's missing-tenant answer in Fiber's idiom: the request
// goes on, unlimited.
func next(c *fiber.Ctx) error { return c.Next() }

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
	app := fiber.New(c)
	// fasthttp recovers from no panic: a handler's would end the process.
	app.Use(recover.New())
	return app
}

// authenticate is the kit's authentication in Fiber's idiom: the tenant
// goes into c.Locals. It keeps a string that points into the request's
// buffer, as c.Get returns it, which Fiber reuses for the next request on
// the connection.
func authenticate(c *fiber.Ctx) error {
	if tenant := adaptertest.Tenant(c.Get("X-Tenant-ID"), c.Get(adaptertest.EscapedTenantHeader)); tenant != "" {
		c.Locals(adaptertest.TenantKey{}, tenant)
	}
	return c.Next()
}

var byTenant = tollgatefiber.TenantFromContext(adaptertest.TenantKey{})

// fields parses header values with a parser of structured fields that is
// not tollgate's.
var fields = adaptertest.FieldParsers{
	List: func(v string) error { _, err := httpsfv.UnmarshalList([]string{v}); return err },
	Item: func(v string) error { _, err := httpsfv.UnmarshalItem([]string{v}); return err },
}

// slow is the handler of the kit's in-flight routes.
func slow(s adaptertest.Setup) fiber.Handler {
	return func(c *fiber.Ctx) error {
		s.Slow(c.UserContext(), c.Get(adaptertest.SlowHeader))
		return c.SendString("ok")
	}
}

// TestConformance runs the kit with the middleware on each route.
func TestConformance(t *testing.T) {
	adaptertest.RunWith(t, func(t *testing.T, s adaptertest.Setup) string {
		limit := tollgatefiber.New(tollgatefiber.Config{
			Limiter: s.Limiter,
			Tenant:  byTenant,
			Next:    func(c *fiber.Ctx) bool { return c.Path() == "/skipped" },
		})
		app := newApp()
		app.Use(authenticate)
		app.Get("/limited", limit, ok)
		app.Get("/skipped", limit, ok)
		app.Get("/costly", tollgatefiber.New(tollgatefiber.Config{Limiter: s.Limiter, Tenant: byTenant, Cost: 5}), ok)
		app.Get("/custom", tollgatefiber.New(tollgatefiber.Config{Limiter: s.Limiter, Tenant: byTenant, LimitReached: teapot}), ok)
		app.Get("/public", tollgatefiber.New(tollgatefiber.Config{Limiter: s.Limiter, Tenant: byTenant, MissingTenant: next}), ok)
		app.Get("/reports/:id", tollgatefiber.New(tollgatefiber.Config{Limiter: s.Limiter, Tenant: byTenant, Budget: s.Budget}), ok)
		app.Get("/by-header", tollgatefiber.New(tollgatefiber.Config{Limiter: s.Limiter}), ok)
		app.Get("/held", tollgatefiber.New(tollgatefiber.Config{Limiter: s.Limiter, Tenant: byTenant, MaxDelay: adaptertest.HeldDelay}), ok)
		app.Get("/slow", tollgatefiber.New(tollgatefiber.Config{Limiter: s.Limiter, Tenant: byTenant}), slow(s))
		app.Get("/slow-held", tollgatefiber.New(tollgatefiber.Config{Limiter: s.Limiter, Tenant: byTenant, MaxDelay: adaptertest.SlotDelay}), slow(s))
		return serve(t, app)
	}, fields)
}

// TestConformanceUse runs the kit with the middleware registered with Use:
// one for the app, which goes by the path for costs and the custom denial,
// one for the reports group with its budget, and one for /by-header.
func TestConformanceUse(t *testing.T) {
	adaptertest.RunWith(t, func(t *testing.T, s adaptertest.Setup) string {
		app := newApp()
		app.Use(authenticate)
		app.Use(tollgatefiber.New(tollgatefiber.Config{
			Limiter: s.Limiter,
			Tenant:  byTenant,
			Next: func(c *fiber.Ctx) bool {
				// The reports, public, by-header and held routes
				// have middleware of their own.
				p := c.Path()
				return p == "/skipped" || p == "/public" || p == "/by-header" || p == "/held" || p == "/slow-held" ||
					strings.HasPrefix(p, "/reports/")
			},
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
				status, body := adapterkit.Denial(&d)
				return c.Status(status).JSON(body, adapterkit.ProblemContentType)
			},
		}))
		for _, p := range []string{"/limited", "/skipped", "/costly", "/custom"} {
			app.Get(p, ok)
		}
		app.Get("/slow", slow(s))
		reports := app.Group("/reports")
		reports.Use(tollgatefiber.New(tollgatefiber.Config{Limiter: s.Limiter, Tenant: byTenant, Budget: s.Budget}))
		reports.Get("/:id", ok)
		public := app.Group("/public")
		public.Use(tollgatefiber.New(tollgatefiber.Config{Limiter: s.Limiter, Tenant: byTenant, MissingTenant: next}))
		public.Get("", ok)
		byHeader := app.Group("/by-header")
		byHeader.Use(tollgatefiber.New(tollgatefiber.Config{Limiter: s.Limiter}))
		byHeader.Get("", ok)
		held := app.Group("/held")
		held.Use(tollgatefiber.New(tollgatefiber.Config{Limiter: s.Limiter, Tenant: byTenant, MaxDelay: adaptertest.HeldDelay}))
		held.Get("", ok)
		slowHeld := app.Group("/slow-held")
		slowHeld.Use(tollgatefiber.New(tollgatefiber.Config{Limiter: s.Limiter, Tenant: byTenant, MaxDelay: adaptertest.SlotDelay}))
		slowHeld.Get("", slow(s))
		return serve(t, app)
	}, fields)
}

// TestClientIP runs on an app that believes X-Forwarded-For from any peer
// (ProxyHeader without EnableTrustedProxyCheck, as c.IP then reads it); the
// adapter believes it only from the proxies it is given.
func TestClientIP(t *testing.T) {
	adaptertest.RunClientIP(t, func(t *testing.T, l *tollgate.Limiter, trusted []netip.Prefix) string {
		app := newApp(fiber.Config{ProxyHeader: fiber.HeaderXForwardedFor})
		app.Get("/ip", tollgatefiber.New(tollgatefiber.Config{Limiter: l, Tenant: tollgatefiber.TenantFromClientIP(trusted...)}), ok)
		return serve(t, app)
	})
}

// TestKeptStringsSurvive keeps the tenant and method of throttled decisions
// and of LimitReached's Decision, then sends more requests on the same
// connection, which reuse the buffers those strings were read from.
func TestKeptStringsSurvive(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tenant func(*fiber.Ctx) string
	}{
		{"header", tollgatefiber.TenantFromHeader("X-Tenant-ID")},
		{"context", byTenant},
		{"default", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := tollgate.Plan{Name: "one", Limit: tollgate.Limit{Rate: 1.0 / 60, Burst: 1}}
			l, ev, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(plan))
			var mu sync.Mutex
			var kept []string
			// A custom method, to check that the method is copied too.
			app := newApp(fiber.Config{RequestMethods: append(append([]string(nil), fiber.DefaultMethods...), "PURGE")})
			app.Use(authenticate)
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
				adaptertest.Drain(t, 1, "PURGE", base+"/hello", "X-Tenant-ID", tenant)
			}
			// Overwrite the buffers once more with requests of the same
			// shape and length.
			for range 20 {
				adaptertest.Get(t, "PURGE", base+"/hello", "X-Tenant-ID", "tenant-zzzz")
			}
			es := ev.All()
			if len(es) < len(tenants) {
				t.Fatalf("%d throttled decisions, want at least %d", len(es), len(tenants))
			}
			for i, tenant := range tenants {
				if es[i].Tenant != tenant || es[i].Method != "PURGE" {
					t.Errorf("throttled decision %d: tenant %q method %q, want %q PURGE", i, es[i].Tenant, es[i].Method, tenant)
				}
				if kept[i] != tenant {
					t.Errorf("LimitReached decision %d: tenant %q, want %q", i, kept[i], tenant)
				}
			}
		})
	}
}

// TestRouteNames registers the middleware on the app, a group and a single
// route, and checks where the limit applies and the route that throttled
// decisions report: Fiber names the middleware's own prefix until it has
// matched the final route, which happens after app.Use and group
// middleware run.
func TestRouteNames(t *testing.T) {
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
			plan := tollgate.Plan{Name: "two", Limit: tollgate.Limit{Rate: 1.0 / 60, Burst: 2}}
			l, ev, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(plan))
			app := newApp()
			tc.register(app, tollgatefiber.New(tollgatefiber.Config{Limiter: l}))
			base := serve(t, app)
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

// TestMissingTenantHandler: in Fiber's idiom the handler calls c.Next to let
// the request through unlimited.
func TestMissingTenantHandler(t *testing.T) {
	plan := tollgate.Plan{Name: "one", Limit: tollgate.Limit{Rate: 1.0 / 60, Burst: 1}}
	l, _, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(plan))
	app := newApp()
	app.Use(tollgatefiber.New(tollgatefiber.Config{Limiter: l,
		MissingTenant: func(c *fiber.Ctx) error { return c.Next() },
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
	free := tollgate.DefaultPlans()[0]
	plans := tollgate.PlanResolverFunc(func(ctx context.Context, _ string) (tollgate.Plan, error) {
		mu.Lock()
		seen = append(seen, ctx.Value(ctxKey{}))
		mu.Unlock()
		return free, nil
	})
	l, _, _ := adaptertest.NewLimiter(t, plans)
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

// TestNewWithoutConfig: New() with no Config at all has no Limiter; the
// kit checks Config{} with a nil one.
func TestNewWithoutConfig(t *testing.T) {
	logs := adaptertest.CaptureDefaultLog(t)
	app := newApp()
	app.Use(tollgatefiber.New())
	app.Get("/hello", ok)
	base := serve(t, app)
	status, body := adaptertest.Get(t, "GET", base+"/hello", "X-Tenant-ID", "acme")
	if status != http.StatusInternalServerError || !strings.Contains(body, adapterkit.CodeInternalError) {
		t.Errorf("status %d body %q, want 500 internal_error", status, body)
	}
	if !strings.Contains(logs.String(), adapterkit.ErrNoLimiter.Error()) {
		t.Errorf("nothing logged naming the missing Limiter:\n%s", logs)
	}
}
