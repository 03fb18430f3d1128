//go:build unix

package bench

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	fiberv3limiter "github.com/gofiber/fiber/v3/middleware/limiter"
	"github.com/labstack/echo/v5"
	echov5mw "github.com/labstack/echo/v5/middleware"
	"github.com/valyala/fasthttp"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	tollgateechov5 "github.com/tollgate-go/tollgate/echov5"
	tollgatefiberv3 "github.com/tollgate-go/tollgate/fiberv3"
)

// How the Echo v5 and Fiber v3 adapter benchmarks are read
// (docs/performance.md has the command and the numbers): as the Echo v4 and
// Fiber v2 ones beside them, on the frameworks' current majors.
//
//   - Each framework serves GET /api/hello, a handler that writes "ok", with
//     one middleware on the whole router (e.Use, app.Use): none (lib=bare),
//     the framework's own limiter (lib=ratelimiter: Echo's
//     middleware.RateLimiter over its memory store; lib=limiter: Fiber's
//     limiter middleware), or tollgate's adapter over a memory.Store
//     (lib=tollgate). ns/op less bare's ns/op is what the limiter adds to a
//     request.
//   - Every limiter keys by the X-Tenant-ID header; requests walk 10,000
//     tenants in turn, each already tracked before the timer starts. Every
//     limiter allows majorsBurst requests per majorsWindow, so no request in
//     a run is denied (a denial fails the benchmark). tollgate writes five
//     rate-limit headers, Fiber's limiter three, Echo's RateLimiter none.
//   - Requests are served in-process, without a network: Echo through
//     ServeHTTP with pre-built requests and one ResponseWriter whose headers
//     are cleared between requests; Fiber through app.Handler() with one
//     fasthttp.RequestCtx whose tenant header is set per request.
//   - cpu-ns/op is the CPU time of the whole process per request (see
//     reportCPU), the figure to compare on a busy machine.

const (
	majorsTenants = 10_000
	majorsBurst   = 1_000_000_000
	majorsRate    = majorsBurst / 1000.0 // tokens a second
)

// majorsWindow is the window of the fixed-window and expiring limiters.
const majorsWindow = 1000 * time.Second

func majorsLimiter(b *testing.B) *tollgate.Limiter {
	store := memory.New()
	b.Cleanup(func() { store.Close() })
	plan := tollgate.Plan{Name: "bench", Limit: tollgate.Limit{Rate: majorsRate, Burst: majorsBurst}}
	l, err := tollgate.New(store, tollgate.SinglePlan(plan))
	if err != nil {
		b.Fatal(err)
	}
	return l
}

func majorsTenantIDs() []string {
	tenants := make([]string, majorsTenants)
	for i := range tenants {
		tenants[i] = "tenant-" + strconv.Itoa(i)
	}
	return tenants
}

// BenchmarkAdapterV5V3 measures what a rate limiter adds to a request
// served by Echo v5 and by Fiber v3; run with `benchstat -col /lib`.
func BenchmarkAdapterV5V3(b *testing.B) {
	tenants := majorsTenantIDs()

	echoCases := []struct {
		name       string
		middleware func(b *testing.B) echo.MiddlewareFunc
	}{
		{"bare", nil},
		{"ratelimiter", func(*testing.B) echo.MiddlewareFunc {
			return echov5mw.RateLimiterWithConfig(echov5mw.RateLimiterConfig{
				Store: echov5mw.NewRateLimiterMemoryStoreWithConfig(echov5mw.RateLimiterMemoryStoreConfig{
					Rate: majorsRate, Burst: majorsBurst, ExpiresIn: majorsWindow,
				}),
				IdentifierExtractor: func(c *echo.Context) (string, error) {
					return c.Request().Header.Get("X-Tenant-ID"), nil
				},
			})
		}},
		{"tollgate", func(b *testing.B) echo.MiddlewareFunc {
			return tollgateechov5.Middleware(majorsLimiter(b))
		}},
	}
	reqs := make([]*http.Request, len(tenants))
	for i, t := range tenants {
		reqs[i] = httptest.NewRequest("GET", "/api/hello", nil)
		reqs[i].Header.Set("X-Tenant-ID", t)
	}
	for _, c := range echoCases {
		b.Run("fw=echov5/lib="+c.name, func(b *testing.B) {
			e := echo.New()
			if c.middleware != nil {
				e.Use(c.middleware(b))
			}
			e.GET("/api/hello", func(c *echo.Context) error { return c.String(http.StatusOK, "ok") })
			w := &discardWriter{header: make(http.Header)}
			serve := func(i int) {
				clear(w.header)
				w.status = 0
				e.ServeHTTP(w, reqs[i])
				if w.status != http.StatusOK {
					b.Fatalf("status %d for %s, want 200", w.status, tenants[i])
				}
			}
			runMajors(b, serve, c.name == "tollgate", func() bool { return w.header.Get("X-Ratelimit-Remaining") != "" })
		})
	}

	fiberCases := []struct {
		name       string
		middleware func(b *testing.B) fiber.Handler
	}{
		{"bare", nil},
		{"limiter", func(*testing.B) fiber.Handler {
			return fiberv3limiter.New(fiberv3limiter.Config{
				Max:          majorsBurst,
				Expiration:   majorsWindow,
				KeyGenerator: func(c fiber.Ctx) string { return c.Get("X-Tenant-ID") },
			})
		}},
		{"tollgate", func(b *testing.B) fiber.Handler {
			return tollgatefiberv3.New(tollgatefiberv3.Config{Limiter: majorsLimiter(b)})
		}},
	}
	for _, c := range fiberCases {
		b.Run("fw=fiberv3/lib="+c.name, func(b *testing.B) {
			app := fiber.New()
			if c.middleware != nil {
				app.Use(c.middleware(b))
			}
			app.Get("/api/hello", func(c fiber.Ctx) error { return c.SendString("ok") })
			handler := app.Handler()

			var req fasthttp.Request
			req.Header.SetMethod(fasthttp.MethodGet)
			req.SetRequestURI("/api/hello")
			var ctx fasthttp.RequestCtx
			ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}, nil)
			serve := func(i int) {
				ctx.Request.Header.Set("X-Tenant-ID", tenants[i])
				ctx.Response.Reset()
				handler(&ctx)
				if s := ctx.Response.StatusCode(); s != fiber.StatusOK {
					b.Fatalf("status %d for %s, want 200", s, tenants[i])
				}
			}
			runMajors(b, serve, c.name != "bare", func() bool { return len(ctx.Response.Header.Peek("X-Ratelimit-Remaining")) > 0 })
		})
	}
}

// runMajors serves every tenant once, untimed, checks the rate-limit
// headers if headers is set, then serves b.N requests walking the tenants.
func runMajors(b *testing.B, serve func(i int), headers bool, hasHeaders func() bool) {
	for i := range majorsTenants {
		serve(i) // track every tenant before the timer starts
	}
	if headers && !hasHeaders() {
		b.Fatal("no rate-limit headers written")
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	i := 0
	for range b.N {
		serve(i)
		if i++; i == majorsTenants {
			i = 0
		}
	}
	reportCPU(b, cpu)
}
