// Command gin is the tollgate example API on Gin.
//
//	go run ./examples/gin                                      # :8080, memory store
//	ADDR=:8081 REDIS_URL=redis://127.0.0.1:6379/0 go run ./examples/gin
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
	"os"

	"github.com/gin-gonic/gin"

	"github.com/tollgate-go/tollgate/examples/internal/demo"
	tollgategin "github.com/tollgate-go/tollgate/gin"
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
	// budget spent is always the caller's own.
	byTenant := tollgategin.WithTenant(tollgategin.TenantFromContext(tenantKey))

	if os.Getenv(gin.EnvGinMode) == "" {
		gin.SetMode(gin.ReleaseMode) // no debug lines between the JSON logs
	}
	r := gin.New()
	r.Use(gin.Recovery())
	r.GET("/healthz", healthz) // not limited: load balancers must always get through
	// Not limited either: the scraper must always get through.
	r.GET("/metrics", gin.WrapH(metrics))
	if admin != nil {
		r.GET(demo.AdminPath, gin.WrapH(admin)) // not limited; behind the admin token
	}

	api := r.Group("/api", authenticate)
	api.GET("/hello", tollgategin.New(limiter, byTenant), hello)
	api.POST("/reports", tollgategin.New(limiter, byTenant,
		tollgategin.WithCost(demo.ReportCost), tollgategin.WithBudget(demo.ReportsBudget)), createReport)

	return demo.ServeHTTP(ctx, cfg.Addr, logger, r)
}

// tenantKey is where authenticate stores the tenant in the gin.Context.
const tenantKey = "tenant"

// authenticate stands in for the app's authentication. A real one verifies
// a token or session and stores the tenant of the authenticated principal;
// this one trusts the X-Tenant-ID header as it is. A request without a
// tenant goes on with none, and the limiter answers it 401.
func authenticate(c *gin.Context) {
	if tenant := c.GetHeader(demo.TenantHeader); tenant != "" {
		c.Set(tenantKey, tenant)
	}
	c.Next()
}

func healthz(c *gin.Context) {
	c.JSON(http.StatusOK, gin.H{"status": "ok"})
}

func hello(c *gin.Context) {
	c.JSON(http.StatusOK, gin.H{"message": "hello, " + c.GetString(tenantKey)})
}

// createReport stands in for expensive work, which is why it costs 10
// tokens and draws from a budget of its own: a tenant can not spend its
// whole plan on reports.
func createReport(c *gin.Context) {
	c.JSON(http.StatusAccepted, gin.H{"status": "queued", "tenant": c.GetString(tenantKey)})
}
