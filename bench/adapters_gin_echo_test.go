package bench

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/labstack/echo/v4"
	echomw "github.com/labstack/echo/v4/middleware"
	ulule "github.com/ulule/limiter/v3"
	ululegin "github.com/ulule/limiter/v3/drivers/middleware/gin"
	ulmem "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	tollgateecho "github.com/tollgate-go/tollgate/echo"
	tollgategin "github.com/tollgate-go/tollgate/gin"
)

// How the gin and Echo adapter benchmarks are read (docs/performance.md has
// the command and the numbers):
//
//   - Each framework serves GET /api/hello, a handler that writes "ok", with
//     one middleware on the whole router (r.Use, e.Use): none (lib=bare),
//     the framework's usual limiter (lib=ulule: ulule/limiter's gin
//     middleware over its memory store; lib=ratelimiter: Echo's
//     middleware.RateLimiter over its memory store), or tollgate's adapter
//     over a memory.Store (lib=tollgate). ns/op less bare's ns/op is what the
//     limiter adds to a request.
//   - Every limiter keys by the X-Tenant-ID header; requests walk 10,000
//     tenants in turn, each already tracked before the timer starts. Every
//     limiter allows ginEchoBurst requests per ginEchoWindow, so no request
//     in a run is denied (a denial fails the benchmark). ulule and tollgate
//     write their rate-limit headers; Echo's RateLimiter writes none.
//   - Requests are served in-process, without a network, through the
//     engine's ServeHTTP with pre-built requests and one ResponseWriter whose
//     headers are cleared between requests.

const (
	ginEchoTenants = 10_000
	ginEchoBurst   = 1_000_000_000
	ginEchoWindow  = 1000 * time.Second
)

// ginEchoRate is ginEchoBurst tokens a ginEchoWindow, in tokens a second.
const ginEchoRate = ginEchoBurst / 1000.0

func ginEchoLimiter(b *testing.B) *tollgate.Limiter {
	store := memory.New()
	b.Cleanup(func() { store.Close() })
	plan := tollgate.Plan{Name: "bench", Limit: tollgate.Limit{Rate: ginEchoRate, Burst: ginEchoBurst}}
	l, err := tollgate.New(store, tollgate.SinglePlan(plan))
	if err != nil {
		b.Fatal(err)
	}
	return l
}

func ginEchoTenantHeader(c *gin.Context) string { return c.Request.Header.Get("X-Tenant-ID") }

// BenchmarkAdapterGinEcho measures what a rate limiter adds to a request
// served by gin and by Echo; run with `benchstat -col /lib`.
func BenchmarkAdapterGinEcho(b *testing.B) {
	gin.SetMode(gin.ReleaseMode)
	tenants := make([]string, ginEchoTenants)
	reqs := make([]*http.Request, ginEchoTenants)
	for i := range tenants {
		tenants[i] = "tenant-" + strconv.Itoa(i)
		reqs[i] = httptest.NewRequest("GET", "/api/hello", nil)
		reqs[i].Header.Set("X-Tenant-ID", tenants[i])
	}

	ginCases := []struct {
		name       string
		middleware func(b *testing.B) gin.HandlerFunc
	}{
		{"bare", nil},
		{"ulule", func(*testing.B) gin.HandlerFunc {
			l := ulule.New(ulmem.NewStore(), ulule.Rate{Period: ginEchoWindow, Limit: ginEchoBurst})
			return ululegin.NewMiddleware(l, ululegin.WithKeyGetter(ginEchoTenantHeader))
		}},
		{"tollgate", func(b *testing.B) gin.HandlerFunc {
			return tollgategin.New(ginEchoLimiter(b))
		}},
	}
	for _, c := range ginCases {
		b.Run("fw=gin/lib="+c.name, func(b *testing.B) {
			r := gin.New()
			if c.middleware != nil {
				r.Use(c.middleware(b))
			}
			r.GET("/api/hello", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
			runAdapterGinEcho(b, r, reqs, c.name != "bare")
		})
	}

	echoCases := []struct {
		name       string
		middleware func(b *testing.B) echo.MiddlewareFunc
	}{
		{"bare", nil},
		{"ratelimiter", func(*testing.B) echo.MiddlewareFunc {
			return echomw.RateLimiterWithConfig(echomw.RateLimiterConfig{
				Store: echomw.NewRateLimiterMemoryStoreWithConfig(echomw.RateLimiterMemoryStoreConfig{
					Rate: rate.Limit(ginEchoRate), Burst: ginEchoBurst, ExpiresIn: ginEchoWindow,
				}),
				IdentifierExtractor: func(c echo.Context) (string, error) {
					return c.Request().Header.Get("X-Tenant-ID"), nil
				},
			})
		}},
		{"tollgate", func(b *testing.B) echo.MiddlewareFunc {
			return tollgateecho.Middleware(ginEchoLimiter(b))
		}},
	}
	for _, c := range echoCases {
		b.Run("fw=echo/lib="+c.name, func(b *testing.B) {
			e := echo.New()
			if c.middleware != nil {
				e.Use(c.middleware(b))
			}
			e.GET("/api/hello", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
			runAdapterGinEcho(b, e, reqs, c.name == "tollgate")
		})
	}
}

// runAdapterGinEcho serves reqs through h in turn, b.N times in all, and
// fails unless every answer is 200 and, if headers is set, carries the
// rate-limit headers.
func runAdapterGinEcho(b *testing.B, h http.Handler, reqs []*http.Request, headers bool) {
	w := &discardWriter{header: make(http.Header)}
	serve := func(i int) {
		clear(w.header)
		w.status = 0
		h.ServeHTTP(w, reqs[i])
		if w.status != http.StatusOK {
			b.Fatalf("status %d for %s, want 200", w.status, reqs[i].Header.Get("X-Tenant-ID"))
		}
	}
	for i := range reqs {
		serve(i) // track every tenant before the timer starts
	}
	if headers && w.header.Get("X-Ratelimit-Remaining") == "" {
		b.Fatalf("no rate-limit headers written: %v", w.header)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	i := 0
	for range b.N {
		serve(i)
		if i++; i == len(reqs) {
			i = 0
		}
	}
	reportCPU(b, cpu0)
}
