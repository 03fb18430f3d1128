//go:build unix

package bench

import (
	"net/http"
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
	majorsBurst = 1_000_000_000
	majorsRate  = majorsBurst / 1000.0 // tokens a second
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

// BenchmarkAdapterV5V3 is the adapter benchmark on Echo v5 and Fiber v3.
func BenchmarkAdapterV5V3(b *testing.B) {
	tenants := adapterTenantIDs()
	reqs := adapterRequests(tenants)
	for _, c := range echov5Cases {
		b.Run("fw=echov5/lib="+c.name, func(b *testing.B) {
			serve, has := httpServe(b, echov5Router(c.build(b)), reqs)
			runAdapter(b, serve, c.name == "tollgate", has)
		})
	}
	for _, c := range fiberv3Cases {
		b.Run("fw=fiberv3/lib="+c.name, func(b *testing.B) {
			serve, has := fasthttpServe(b, fiberv3Handler(c.build(b)), tenants)
			runAdapter(b, serve, c.name != "bare", has)
		})
	}
}

// echov5Cases are Echo v5's middlewares: none, its RateLimiter, tollgate's.
var echov5Cases = []adapterCase[echo.MiddlewareFunc]{
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

// echov5Router serves GET /api/hello behind mw, if any.
func echov5Router(mw echo.MiddlewareFunc) http.Handler {
	e := echo.New()
	if mw != nil {
		e.Use(mw)
	}
	e.GET("/api/hello", func(c *echo.Context) error { return c.String(http.StatusOK, "ok") })
	return e
}

// fiberv3Cases are Fiber v3's middlewares: none, its limiter, tollgate's.
var fiberv3Cases = []adapterCase[fiber.Handler]{
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

// fiberv3Handler serves GET /api/hello behind mw, if any.
func fiberv3Handler(mw fiber.Handler) fasthttp.RequestHandler {
	app := fiber.New()
	if mw != nil {
		app.Use(mw)
	}
	app.Get("/api/hello", func(c fiber.Ctx) error { return c.SendString("ok") })
	return app.Handler()
}
