//go:build unix

package bench

import (
	"net/http"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/httprate"
	"github.com/gofiber/fiber/v2"
	fiberlimiter "github.com/gofiber/fiber/v2/middleware/limiter"
	"github.com/valyala/fasthttp"

	tollgatechi "github.com/tollgate-go/tollgate/chi"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	tollgatefiber "github.com/tollgate-go/tollgate/fiber"
)

// How the chi and Fiber adapter benchmarks are read (docs/performance.md has
// the command and the numbers):
//
//   - Each framework serves GET /api/hello, a handler that writes "ok", with
//     one middleware registered on the whole router (r.Use, app.Use): none
//     (lib=bare), the framework's usual limiter (lib=httprate for chi, the
//     Fiber limiter middleware for Fiber), or tollgate's adapter over a
//     memory.Store (lib=tollgate). ns/op less bare's ns/op is what the
//     limiter adds to a request.
//   - Every limiter keys by the X-Tenant-ID header; requests walk 10,000
//     tenants in turn, each already tracked before the timer starts. Every
//     limiter allows chiFiberBurst requests per chiFiberWindow, so
//     no request in a run is denied (a denial fails the benchmark), and
//     every limiter writes its rate-limit headers.
//   - Requests are served in-process, without a network: chi through
//     Router.ServeHTTP with pre-built requests and one ResponseWriter whose
//     headers are cleared between requests; Fiber through app.Handler() with
//     one fasthttp.RequestCtx whose tenant header is set per request.
//   - Besides ns/op, each case reports cpu-ns/op: the CPU time (user and
//     system, all threads, so GC work counts) the process spent per request.
//     On a busy machine ns/op includes time spent waiting for a CPU;
//     cpu-ns/op does not, and is the figure to compare there.

const (
	chiFiberBurst  = 1_000_000_000
	chiFiberWindow = 1000 * time.Second
)

// chiFiberLimit is chiFiberBurst tokens refilled over chiFiberWindow.
var chiFiberLimit = tollgate.Limit{Rate: chiFiberBurst / chiFiberWindow.Seconds(), Burst: chiFiberBurst}

func chiFiberLimiter(b *testing.B) *tollgate.Limiter {
	store := memory.New()
	b.Cleanup(func() { store.Close() })
	l, err := tollgate.New(store, tollgate.SinglePlan(tollgate.Plan{Name: "bench", Limit: chiFiberLimit}))
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkAdapter measures what a rate limiter adds to a request served by
// chi and by Fiber; run with `benchstat -col /lib`.
func BenchmarkAdapter(b *testing.B) {
	tenants := adapterTenantIDs()
	reqs := adapterRequests(tenants)
	for _, c := range chiCases {
		b.Run("fw=chi/lib="+c.name, func(b *testing.B) {
			serve, has := httpServe(b, chiRouter(c.build(b)), reqs)
			runAdapter(b, serve, c.name != "bare", has)
		})
	}
	for _, c := range fiberCases {
		b.Run("fw=fiber/lib="+c.name, func(b *testing.B) {
			serve, has := fasthttpServe(b, fiberHandler(c.build(b)), tenants)
			runAdapter(b, serve, c.name != "bare", has)
		})
	}
}

// chiCases are chi's middlewares: none, httprate, tollgate's.
var chiCases = []adapterCase[func(http.Handler) http.Handler]{
	{"bare", nil},
	{"httprate", func(*testing.B) func(http.Handler) http.Handler {
		return httprate.LimitBy(chiFiberBurst, chiFiberWindow, func(r *http.Request) (string, error) {
			return r.Header.Get("X-Tenant-ID"), nil
		})
	}},
	{"tollgate", func(b *testing.B) func(http.Handler) http.Handler {
		return tollgatechi.Middleware(chiFiberLimiter(b))
	}},
}

// chiRouter serves GET /api/hello behind mw, if any.
func chiRouter(mw func(http.Handler) http.Handler) http.Handler {
	r := chi.NewRouter()
	if mw != nil {
		r.Use(mw)
	}
	r.Get("/api/hello", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) })
	return r
}

// fiberCases are Fiber's middlewares: none, its limiter, tollgate's.
var fiberCases = []adapterCase[fiber.Handler]{
	{"bare", nil},
	{"limiter", func(*testing.B) fiber.Handler {
		return fiberlimiter.New(fiberlimiter.Config{
			Max:          chiFiberBurst,
			Expiration:   chiFiberWindow,
			KeyGenerator: func(c *fiber.Ctx) string { return c.Get("X-Tenant-ID") },
		})
	}},
	{"tollgate", func(b *testing.B) fiber.Handler {
		return tollgatefiber.New(tollgatefiber.Config{Limiter: chiFiberLimiter(b)})
	}},
}

// fiberHandler serves GET /api/hello behind mw, if any.
func fiberHandler(mw fiber.Handler) fasthttp.RequestHandler {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	if mw != nil {
		app.Use(mw)
	}
	app.Get("/api/hello", func(c *fiber.Ctx) error { return c.SendString("ok") })
	return app.Handler()
}
