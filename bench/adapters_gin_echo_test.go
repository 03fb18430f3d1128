package bench

import (
	"net/http"
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
	ginEchoBurst  = 1_000_000_000
	ginEchoWindow = 1000 * time.Second
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

// ginCases are gin's middlewares: none, its usual limiter, tollgate's.
var ginCases = []adapterCase[gin.HandlerFunc]{
	{"bare", nil},
	{"ulule", func(*testing.B) gin.HandlerFunc {
		l := ulule.New(ulmem.NewStore(), ulule.Rate{Period: ginEchoWindow, Limit: ginEchoBurst})
		return ululegin.NewMiddleware(l, ululegin.WithKeyGetter(ginEchoTenantHeader))
	}},
	{"tollgate", func(b *testing.B) gin.HandlerFunc {
		return tollgategin.New(ginEchoLimiter(b))
	}},
}

// ginRouter serves GET /api/hello behind mw, if any.
func ginRouter(mw gin.HandlerFunc) http.Handler {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	if mw != nil {
		r.Use(mw)
	}
	r.GET("/api/hello", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	return r
}

// echoCases are Echo's middlewares: none, its RateLimiter, tollgate's.
var echoCases = []adapterCase[echo.MiddlewareFunc]{
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

// echoRouter serves GET /api/hello behind mw, if any.
func echoRouter(mw echo.MiddlewareFunc) http.Handler {
	e := echo.New()
	if mw != nil {
		e.Use(mw)
	}
	e.GET("/api/hello", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
	return e
}

// BenchmarkAdapterGinEcho measures what a rate limiter adds to a request
// served by gin and by Echo; run with `benchstat -col /lib`.
func BenchmarkAdapterGinEcho(b *testing.B) {
	reqs := adapterRequests(adapterTenantIDs())
	for _, c := range ginCases {
		b.Run("fw=gin/lib="+c.name, func(b *testing.B) {
			serve, has := httpServe(b, ginRouter(c.build(b)), reqs)
			runAdapter(b, serve, c.name != "bare", has)
		})
	}
	for _, c := range echoCases {
		b.Run("fw=echo/lib="+c.name, func(b *testing.B) {
			serve, has := httpServe(b, echoRouter(c.build(b)), reqs)
			runAdapter(b, serve, c.name == "tollgate", has)
		})
	}
}
