//go:build unix

package bench

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
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
	chiFiberTenants = 10_000
	chiFiberBurst   = 1_000_000_000
	chiFiberWindow  = 1000 * time.Second
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
	tenants := make([]string, chiFiberTenants)
	for i := range tenants {
		tenants[i] = "tenant-" + strconv.Itoa(i)
	}

	chiCases := []struct {
		name       string
		middleware func(b *testing.B) func(http.Handler) http.Handler
	}{
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
	for _, c := range chiCases {
		b.Run("fw=chi/lib="+c.name, func(b *testing.B) {
			r := chi.NewRouter()
			if c.middleware != nil {
				r.Use(c.middleware(b))
			}
			r.Get("/api/hello", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) })
			reqs := make([]*http.Request, len(tenants))
			for i, t := range tenants {
				reqs[i] = httptest.NewRequest("GET", "/api/hello", nil)
				reqs[i].Header.Set("X-Tenant-ID", t)
			}
			w := &discardWriter{header: make(http.Header)}
			serve := func(i int) {
				clear(w.header)
				w.status = 0
				r.ServeHTTP(w, reqs[i])
				if w.status != http.StatusOK {
					b.Fatalf("status %d for %s, want 200", w.status, tenants[i])
				}
			}
			for i := range reqs {
				serve(i) // track every tenant before the timer starts
			}
			if c.name != "bare" && w.header.Get("X-Ratelimit-Remaining") == "" {
				b.Fatalf("%s wrote no rate-limit headers: %v", c.name, w.header)
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu := cpuTime()
			i := 0
			for range b.N {
				serve(i)
				if i++; i == len(reqs) {
					i = 0
				}
			}
			reportCPU(b, cpu)
		})
	}

	fiberCases := []struct {
		name       string
		middleware func(b *testing.B) fiber.Handler
	}{
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
	for _, c := range fiberCases {
		b.Run("fw=fiber/lib="+c.name, func(b *testing.B) {
			app := fiber.New(fiber.Config{DisableStartupMessage: true})
			if c.middleware != nil {
				app.Use(c.middleware(b))
			}
			app.Get("/api/hello", func(c *fiber.Ctx) error { return c.SendString("ok") })
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
			for i := range tenants {
				serve(i) // track every tenant before the timer starts
			}
			if c.name != "bare" && len(ctx.Response.Header.Peek("X-Ratelimit-Remaining")) == 0 {
				b.Fatalf("%s wrote no rate-limit headers:\n%s", c.name, ctx.Response.Header.String())
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu := cpuTime()
			i := 0
			for range b.N {
				serve(i)
				if i++; i == len(tenants) {
					i = 0
				}
			}
			reportCPU(b, cpu)
		})
	}
}
