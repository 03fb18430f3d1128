package tollgatefiberv3_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/recover"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adapterkit"
	"github.com/tollgate-go/tollgate/core/adaptertest"
	tollgatefiberv3 "github.com/tollgate-go/tollgate/fiberv3"
)

func ok(c fiber.Ctx) error { return c.SendString("ok") }

// next is the kit's missing-tenant answer in Fiber's idiom: the request
// goes on, unlimited.
func next(c fiber.Ctx) error { return c.Next() }

func teapot(c fiber.Ctx, d tollgate.Decision) error {
	return c.Status(fiber.StatusTeapot).JSON(fiber.Map{"denied": d.Tenant})
}

// serve runs app on a loopback listener until the test ends and returns
// its base URL.
func serve(t *testing.T, app *fiber.App) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true}) }()
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

// authenticate is the kit's authentication: it keeps the X-Tenant-ID
// header in Locals as c.Get returns it, a string that points into a buffer
// Fiber reuses for the next request on the connection.
func authenticate(c fiber.Ctx) error {
	if tenant := adaptertest.Tenant(c.Get("X-Tenant-ID"), c.Get(adaptertest.EscapedTenantHeader)); tenant != "" {
		c.Locals(adaptertest.TenantKey{}, tenant)
	}
	return c.Next()
}

var byPrincipal = tollgatefiberv3.TenantFromContext(adaptertest.TenantKey{})

// fields parses header values with a parser of structured fields that is
// not tollgate's.
var fields = adaptertest.FieldParsers{
	List: func(v string) error { _, err := httpsfv.UnmarshalList([]string{v}); return err },
	Item: func(v string) error { _, err := httpsfv.UnmarshalItem([]string{v}); return err },
}

// slow is the handler of the kit's in-flight routes.
func slow(s adaptertest.Setup) fiber.Handler {
	return func(c fiber.Ctx) error {
		s.Slow(c.Context(), c.Get(adaptertest.SlowHeader))
		return c.SendString("ok")
	}
}

// newApp returns an app that recovers from panics, which fasthttp does not:
// a handler's would end the process.
func newApp() *fiber.App {
	app := fiber.New()
	app.Use(recover.New())
	return app
}

// TestConformance runs the kit with the middleware on each route.
func TestConformance(t *testing.T) {
	adaptertest.RunWith(t, func(t *testing.T, s adaptertest.Setup) string {
		limit := tollgatefiberv3.New(tollgatefiberv3.Config{
			Limiter: s.Limiter,
			Tenant:  byPrincipal,
			Next:    func(c fiber.Ctx) bool { return c.Path() == "/skipped" },
		})
		app := newApp()
		app.Use(authenticate)
		app.Get("/limited", limit, ok)
		app.Get("/skipped", limit, ok)
		app.Get("/costly", tollgatefiberv3.New(tollgatefiberv3.Config{Limiter: s.Limiter, Tenant: byPrincipal, Cost: 5}), ok)
		app.Get("/custom", tollgatefiberv3.New(tollgatefiberv3.Config{Limiter: s.Limiter, Tenant: byPrincipal, LimitReached: teapot}), ok)
		app.Get("/public", tollgatefiberv3.New(tollgatefiberv3.Config{Limiter: s.Limiter, Tenant: byPrincipal, MissingTenant: next}), ok)
		app.Get("/reports/:id", tollgatefiberv3.New(tollgatefiberv3.Config{Limiter: s.Limiter, Tenant: byPrincipal, Budget: s.Budget}), ok)
		app.Get("/by-header", tollgatefiberv3.New(tollgatefiberv3.Config{Limiter: s.Limiter}), ok)
		app.Get("/held", tollgatefiberv3.New(tollgatefiberv3.Config{Limiter: s.Limiter, Tenant: byPrincipal, MaxDelay: adaptertest.HeldDelay}), ok)
		app.Get("/slow", tollgatefiberv3.New(tollgatefiberv3.Config{Limiter: s.Limiter, Tenant: byPrincipal}), slow(s))
		app.Get("/slow-held", tollgatefiberv3.New(tollgatefiberv3.Config{Limiter: s.Limiter, Tenant: byPrincipal, MaxDelay: adaptertest.SlotDelay}), slow(s))
		return serve(t, app)
	}, fields)
}

// TestConformanceUse runs the kit with the middleware registered with
// app.Use: one for the whole app, told the routes apart by path, and one
// for each prefix that needs a configuration of its own.
func TestConformanceUse(t *testing.T) {
	adaptertest.RunWith(t, func(t *testing.T, s adaptertest.Setup) string {
		app := newApp()
		app.Use(authenticate)
		// Under app.Use the route is named by the prefix, "/reports".
		app.Use("/reports", tollgatefiberv3.New(tollgatefiberv3.Config{Limiter: s.Limiter, Tenant: byPrincipal, Budget: s.Budget}))
		app.Use("/public", tollgatefiberv3.New(tollgatefiberv3.Config{Limiter: s.Limiter, Tenant: byPrincipal, MissingTenant: next}))
		app.Use("/by-header", tollgatefiberv3.New(tollgatefiberv3.Config{Limiter: s.Limiter}))
		app.Use("/held", tollgatefiberv3.New(tollgatefiberv3.Config{Limiter: s.Limiter, Tenant: byPrincipal, MaxDelay: adaptertest.HeldDelay}))
		app.Use("/slow-held", tollgatefiberv3.New(tollgatefiberv3.Config{Limiter: s.Limiter, Tenant: byPrincipal, MaxDelay: adaptertest.SlotDelay}))
		app.Use(tollgatefiberv3.New(tollgatefiberv3.Config{
			Limiter: s.Limiter,
			Tenant:  byPrincipal,
			Next: func(c fiber.Ctx) bool {
				p := c.Path()
				return p == "/skipped" || p == "/public" || p == "/by-header" || p == "/held" || p == "/slow-held" ||
					strings.HasPrefix(p, "/reports/")
			},
			CostFunc: func(c fiber.Ctx) int64 {
				if c.Path() == "/costly" {
					return 5
				}
				return 0 // counts as 1
			},
			LimitReached: func(c fiber.Ctx, d tollgate.Decision) error {
				if c.Path() == "/custom" {
					return teapot(c, d)
				}
				status, body := adapterkit.Denial(&d)
				return c.Status(status).JSON(body, adapterkit.ProblemContentType)
			},
		}))
		for _, p := range []string{"/limited", "/skipped", "/costly", "/custom", "/public", "/reports/:id", "/by-header", "/held"} {
			app.Get(p, ok)
		}
		app.Get("/slow", slow(s))
		app.Get("/slow-held", slow(s))
		return serve(t, app)
	}, fields)
}

// newLimiter returns a Limiter of burst requests per tenant, refilled at
// one a minute on a stopped clock, that records its throttled decisions.
func newLimiter(t *testing.T, burst int64) (*tollgate.Limiter, *adaptertest.Events) {
	plan := tollgate.Plan{Name: "test", Limit: tollgate.Limit{Rate: 1.0 / 60, Burst: burst}}
	l, ev, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(plan))
	return l, ev
}

// TestKeptStringsOutliveTheRequest sends requests on one keep-alive
// connection, so that Fiber reuses its buffers for each, and checks that
// the strings the Limiter kept (in decisions and store keys) are
// still those of their own requests. The method is one the app adds, which
// Fiber v3 reads from its configuration, not from the request's buffer.
func TestKeptStringsOutliveTheRequest(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tenant func(fiber.Ctx) string // nil for the default header
	}{
		{"FromContext", byPrincipal},
		{"FromHeader", tollgatefiberv3.TenantFromHeader("X-Tenant-ID")},
		{"Default", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, ev := newLimiter(t, 1)
			var mu sync.Mutex
			var kept []string
			app := fiber.New(fiber.Config{RequestMethods: append(append([]string(nil), fiber.DefaultMethods...), "PURGE")})
			app.Use(authenticate)
			app.All("/hello", tollgatefiberv3.New(tollgatefiberv3.Config{
				Limiter: l,
				Tenant:  tc.tenant,
				LimitReached: func(c fiber.Ctx, d tollgate.Decision) error {
					mu.Lock()
					kept = append(kept, d.Tenant)
					mu.Unlock()
					return c.SendStatus(http.StatusTooManyRequests)
				},
			}), ok)
			base := serve(t, app)

			// The adaptertest client keeps one connection alive.
			tenants := []string{"tenant-aaaa", "tenant-bbbb", "tenant-cccc"}
			for _, tenant := range tenants {
				adaptertest.Drain(t, 1, "PURGE", base+"/hello", "X-Tenant-ID", tenant)
			}
			// Same length, so that each lands where the others' bytes were.
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
				if status, _ := adaptertest.Get(t, "PURGE", base+"/hello", "X-Tenant-ID", tenant); status != http.StatusTooManyRequests {
					t.Errorf("%s after the others' requests: status %d, want 429: the bucket's key changed", tenant, status)
				}
			}
		})
	}
}

// TestClientIP runs the kit's client-address cases on an app that believes
// X-Forwarded-For from any peer (c.IP() would read it); the adapter
// believes it only from the proxies it is given.
func TestClientIP(t *testing.T) {
	adaptertest.RunClientIP(t, func(t *testing.T, l *tollgate.Limiter, trusted []netip.Prefix) string {
		app := fiber.New(fiber.Config{ProxyHeader: fiber.HeaderXForwardedFor})
		app.Get("/ip", tollgatefiberv3.New(tollgatefiberv3.Config{Limiter: l, Tenant: tollgatefiberv3.TenantFromClientIP(trusted...)}), ok)
		return serve(t, app)
	})
}

// TestMisconfigured covers what the kit's NilLimiter case does not: New
// without a Config, and a Budget that is no name or that no plan has.
func TestMisconfigured(t *testing.T) {
	l, _ := newLimiter(t, 1)
	for _, tc := range []struct {
		name string
		cfg  []tollgatefiberv3.Config
		want string // in the log
	}{
		{"no Config", nil, "Limiter is nil"},
		{"nil Limiter", []tollgatefiberv3.Config{{Cost: 3}}, "Limiter is nil"},
		{"invalid Budget", []tollgatefiberv3.Config{{Limiter: l, Budget: "no spaces"}}, "Budget"},
		{"Budget no plan has", []tollgatefiberv3.Config{{Limiter: l, Budget: "reprots"}}, "reprots"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logged := adaptertest.CaptureDefaultLog(t)
			mw := tollgatefiberv3.New(tc.cfg...)
			if n := logged.Count("misconfigured"); n != 1 || !strings.Contains(logged.String(), tc.want) {
				t.Fatalf("at build, logged %d lines, want one naming %q:\n%s", n, tc.want, logged)
			}
			app := fiber.New()
			app.Get("/hello", mw, ok)
			base := serve(t, app)
			for range 3 {
				status, body := adaptertest.Get(t, "GET", base+"/hello", "X-Tenant-ID", "acme")
				var got adapterkit.Body
				if err := json.Unmarshal([]byte(body), &got); err != nil || status != http.StatusInternalServerError || got.Error != adapterkit.CodeInternalError {
					t.Fatalf("status %d body %q, want 500 with %q", status, body, adapterkit.CodeInternalError)
				}
			}
			if n := logged.Count("misconfigured"); n != 1 {
				t.Errorf("logged %d lines after 3 requests, want the one at build", n)
			}
		})
	}
}

func TestMissingTenantHandler(t *testing.T) {
	l, _ := newLimiter(t, 1)
	app := fiber.New()
	app.Get("/hello", tollgatefiberv3.New(tollgatefiberv3.Config{
		Limiter:       l,
		MissingTenant: func(c fiber.Ctx) error { return c.Next() }, // anonymous requests go unlimited
	}), ok)
	base := serve(t, app)
	for range 3 {
		if status, body := adaptertest.Get(t, "GET", base+"/hello"); status != http.StatusOK || body != "ok" {
			t.Fatalf("anonymous request: status %d body %q, want 200 ok", status, body)
		}
	}
	adaptertest.Drain(t, 1, "GET", base+"/hello", "X-Tenant-ID", "acme")
}

// TestDenialHeaders checks the default denial through Fiber: the JSON body,
// and the headers set with fasthttp's own API, each exactly once.
func TestDenialHeaders(t *testing.T) {
	l, _ := newLimiter(t, 1)
	app := fiber.New()
	app.Get("/hello", tollgatefiberv3.New(tollgatefiberv3.Config{Limiter: l}), ok)
	base := serve(t, app)
	adaptertest.Get(t, "GET", base+"/hello", "X-Tenant-ID", "acme")
	req, _ := http.NewRequest("GET", base+"/hello", nil)
	req.Header.Set("X-Tenant-ID", "acme")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), `"retry_after":60`) {
		t.Fatalf("status %d body %s, want 429 naming a retry after 60s", resp.StatusCode, body)
	}
	for name, want := range map[string]string{
		"X-RateLimit-Limit":      "1",
		"X-RateLimit-Remaining":  "0",
		"RateLimit-Policy":       `"test";q=1;w=60`,
		"RateLimit":              `"test";r=0;t=60`,
		"Retry-After":            "60",
		"X-Content-Type-Options": "nosniff",
	} {
		if got := resp.Header.Values(name); len(got) != 1 || got[0] != want {
			t.Errorf("%s = %q, want [%q]", name, got, want)
		}
	}
	if ct := resp.Header.Get("Content-Type"); ct != adapterkit.ProblemContentType {
		t.Errorf("Content-Type %q, want %s", ct, adapterkit.ProblemContentType)
	}
}
