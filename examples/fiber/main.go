// Command fiber is the tollgate example API on Fiber.
//
//	go run ./examples/fiber                                    # :8080, memory store
//	ADDR=:8081 REDIS_URL=redis://127.0.0.1:6379/0 go run ./examples/fiber
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
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/gofiber/fiber/v2/middleware/recover"

	"github.com/tollgate-go/tollgate/examples/internal/demo"
	tollgatefiber "github.com/tollgate-go/tollgate/fiber"
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
	// budget spent is always the caller's own. Registered on each route
	// (not on the group), it names the full route in throttle logs.
	byTenant := tollgatefiber.TenantFromContext(tenantKey)
	limitHello := tollgatefiber.New(tollgatefiber.Config{Limiter: limiter, Tenant: byTenant})
	limitReports := tollgatefiber.New(tollgatefiber.Config{Limiter: limiter, Tenant: byTenant,
		Cost: demo.ReportCost, Budget: demo.ReportsBudget})

	app := fiber.New(fiber.Config{
		DisableStartupMessage: true, // the JSON "listening" line says it
		ReadTimeout:           30 * time.Second,
	})
	app.Use(recover.New())
	app.Get("/healthz", healthz) // not limited: load balancers must always get through
	// Not limited either: the scraper must always get through.
	app.Get("/metrics", adaptor.HTTPHandler(metrics))
	if admin != nil {
		app.Get(demo.AdminPath, adaptor.HTTPHandler(admin)) // not limited; behind the admin token
	}

	api := app.Group("/api", authenticate)
	api.Get("/hello", limitHello, hello)
	api.Post("/reports", limitReports, createReport)

	return demo.Serve(ctx, cfg.Addr, logger, app.Listener, app.ShutdownWithContext)
}

// tenantKey is where authenticate stores the tenant in c.Locals.
const tenantKey = "tenant"

// authenticate stands in for the app's authentication. A real one verifies
// a token or session and stores the tenant of the authenticated principal;
// this one trusts the X-Tenant-ID header as it is. A request without a
// tenant goes on with none, and the limiter answers it 401.
//
// c.Get's string points into a buffer that Fiber reuses after the request;
// tollgatefiber copies the tenant before keeping it, and so must anything
// else that keeps it.
func authenticate(c *fiber.Ctx) error {
	if tenant := c.Get(demo.TenantHeader); tenant != "" {
		c.Locals(tenantKey, tenant)
	}
	return c.Next()
}

func healthz(c *fiber.Ctx) error {
	return c.JSON(fiber.Map{"status": "ok"})
}

func hello(c *fiber.Ctx) error {
	tenant, _ := c.Locals(tenantKey).(string)
	return c.JSON(fiber.Map{"message": "hello, " + tenant})
}

// createReport stands in for expensive work, which is why it costs 10
// tokens and draws from a budget of its own: a tenant can not spend its
// whole plan on reports.
func createReport(c *fiber.Ctx) error {
	tenant, _ := c.Locals(tenantKey).(string)
	return c.Status(fiber.StatusAccepted).JSON(fiber.Map{"status": "queued", "tenant": tenant})
}
