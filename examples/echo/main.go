// Command echo is the tollgate example API on Echo.
//
//	go run ./examples/echo                                     # :8080, memory store
//	ADDR=:8081 REDIS_URL=redis://127.0.0.1:6379/0 go run ./examples/echo
//
// GET /api/hello costs a tenant 1 token, POST /api/reports 10 (from the plan
// and from the tenant's reports budget, 50 tokens an hour), and GET /healthz
// is not limited, nor GET /metrics (Prometheus). The tenant is the
// X-Tenant-ID header: acme is on the enterprise plan, globex on growth,
// initech on startup, umbrella on trial (a burst of 10 at 5/s and 30
// requests a UTC day), anyone else on free. With ADMIN_TOKEN set,
// GET /admin/tollgate serves the upgrade candidates to requests with
// "Authorization: Bearer $ADMIN_TOKEN"; with SHADOW=1, limits are computed
// and recorded but never enforced.
package main

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	tollgateecho "github.com/tollgate-go/tollgate/echo"
	"github.com/tollgate-go/tollgate/examples/internal/demo"
)

func main() { demo.Main(run) }

func run(ctx context.Context, logger *slog.Logger) error {
	cfg := demo.ConfigFromEnv()
	limiter, metrics, admin, closeStore, err := demo.NewLimiter(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer closeStore()

	// The limiter reads the tenant that authentication stored, so the
	// budget spent is always the caller's own. ToMiddleware reports a bad
	// Config at start-up rather than on every request.
	limit := tollgateecho.Config{Limiter: limiter, Tenant: tollgateecho.TenantFromContext(tenantKey)}
	limitHello, err := limit.ToMiddleware()
	if err != nil {
		return err
	}
	limit.Cost, limit.Budget = demo.ReportCost, demo.ReportsBudget
	limitReports, err := limit.ToMiddleware()
	if err != nil {
		return err
	}

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Use(middleware.Recover())
	e.GET("/healthz", healthz) // not limited: load balancers must always get through
	// Not limited either: the scraper must always get through.
	e.GET("/metrics", echo.WrapHandler(metrics))
	if admin != nil {
		e.GET(demo.AdminPath, echo.WrapHandler(admin)) // not limited; behind the admin token
	}

	// Echo's default error handler renders the limiter's 401 and 429 as
	// JSON; an app with its own HTTPErrorHandler renders them there.
	api := e.Group("/api", authenticate)
	api.GET("/hello", hello, limitHello)
	api.POST("/reports", createReport, limitReports)

	return demo.ServeHTTP(ctx, cfg.Addr, logger, e)
}

// tenantKey is where authenticate stores the tenant in the echo.Context.
const tenantKey = "tenant"

// authenticate stands in for the app's authentication. A real one verifies
// a token or session and stores the tenant of the authenticated principal;
// this one trusts the X-Tenant-ID header as it is. A request without a
// tenant goes on with none, and the limiter answers it 401.
func authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if tenant := c.Request().Header.Get(demo.TenantHeader); tenant != "" {
			c.Set(tenantKey, tenant)
		}
		return next(c)
	}
}

func healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

func hello(c echo.Context) error {
	tenant, _ := c.Get(tenantKey).(string)
	return c.JSON(http.StatusOK, map[string]string{"message": "hello, " + tenant})
}

// createReport stands in for expensive work, which is why it costs 10
// tokens and draws from a budget of its own: a tenant can not spend its
// whole plan on reports.
func createReport(c echo.Context) error {
	tenant, _ := c.Get(tenantKey).(string)
	return c.JSON(http.StatusAccepted, map[string]string{"status": "queued", "tenant": tenant})
}
