// Command fiber is the tollgate example API on Fiber v2: per-tenant rate
// limits sized by each tenant's plan.
//
//	go run ./examples/fiber                                     # :8080, limits in memory
//	REDIS_URL=redis://127.0.0.1:6379/0 go run ./examples/fiber  # limits shared through Redis
//
// Environment: ADDR (default :8080; port 0 picks a free one), REDIS_URL
// (unset: limits in this process), ADMIN_TOKEN (set: the operator's page
// and API under /admin/tollgate), SHADOW=1 (decide and record, never deny).
//
// GET /api/hello costs 1 token, POST /api/reports 10, from the plan and
// from a reports budget of 50 tokens an hour; GET /healthz and GET /metrics
// are not limited. The tenant is the X-Tenant-ID header: acme is on the
// enterprise plan, globex on growth, initech on startup, umbrella on trial
// (a burst of 10 at 5/s and 30 requests a UTC day), anyone else on free.
package main

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	recoverer "github.com/gofiber/fiber/v2/middleware/recover" // not to shadow the builtin recover
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/tollgate-go/tollgate/admin"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/redisstore"
	tollgatefiber "github.com/tollgate-go/tollgate/fiber"
	"github.com/tollgate-go/tollgate/insights"
	tollgateprom "github.com/tollgate-go/tollgate/prometheus"
)

func main() {
	logger := slog.New(slog.NewJSONHandler(os.Stdout, nil))
	if err := run(logger); err != nil {
		logger.Error("exiting", slog.String("error", err.Error()))
		os.Exit(1)
	}
}

func run(logger *slog.Logger) error {
	app := fiber.New(fiber.Config{DisableStartupMessage: true, ReadTimeout: 30 * time.Second})
	app.Use(recoverer.New())
	app.Get("/healthz", healthz)                                 // not limited: load balancers always get through
	app.Get("/metrics", adaptor.HTTPHandler(promhttp.Handler())) // nor does the scraper

	store, closeStore, err := newStore()
	if err != nil {
		return err
	}
	defer closeStore()
	limiter, tracker, err := newLimiter(store, logger)
	if err != nil {
		return err
	}
	// The limiter reads the tenant that authenticate stored. Registered on
	// each route rather than on the group, it names the whole route in
	// logs and metrics.
	byTenant := tollgatefiber.TenantFromContext(tenantKey)
	limitHello := tollgatefiber.New(tollgatefiber.Config{Limiter: limiter, Tenant: byTenant})
	limitReports := tollgatefiber.New(tollgatefiber.Config{Limiter: limiter, Tenant: byTenant, Cost: 10, Budget: "reports"})
	limitSlow := tollgatefiber.New(tollgatefiber.Config{Limiter: limiter, Tenant: byTenant, Budget: "slow"})

	if token := os.Getenv("ADMIN_TOKEN"); token != "" {
		h, err := admin.New(admin.Config{Limiter: limiter, Tracker: tracker, Tokens: map[string]string{"admin": token}})
		if err != nil {
			return err
		}
		app.All("/admin/tollgate", adaptor.HTTPHandler(http.StripPrefix("/admin/tollgate", h)))
		app.All("/admin/tollgate/*", adaptor.HTTPHandler(http.StripPrefix("/admin/tollgate", h)))
	}
	api := app.Group("/api", authenticate)
	api.Get("/hello", limitHello, hello)
	api.Post("/reports", limitReports, createReport)
	api.Get("/slow", limitSlow, work)
	return serve(logger, app)
}

// tenantKey is where authenticate stores the tenant in c.Locals.
const tenantKey = "tenant"

// authenticate stands in for the application's authentication, which
// verifies a token or a session and stores the tenant of the principal.
// This one trusts the X-Tenant-ID header: never do that in production,
// where any client could spend any tenant's budget. (c.Get's string points
// into a buffer that Fiber reuses; tollgatefiber copies it before keeping
// it, and so must anything else that keeps it.)
func authenticate(c *fiber.Ctx) error {
	tenant := c.Get("X-Tenant-ID")
	if tenant == "" {
		return c.Status(fiber.StatusUnauthorized).JSON(fiber.Map{"error": "missing_tenant", "message": "send X-Tenant-ID"})
	}
	c.Locals(tenantKey, tenant)
	return c.Next()
}

// newLimiter returns the API's Limiter on store, with its metrics
// registered for /metrics, and the tracker of the tenants that hit their
// limits, for the operator's page.
func newLimiter(store tollgate.Store, logger *slog.Logger) (*tollgate.Limiter, *insights.Tracker, error) {
	// Every tenant not named here is on the free plan.
	resolver, err := tollgate.NewStaticResolver(plans, "free", map[string]string{
		"acme": "enterprise", "globex": "growth", "initech": "startup", "umbrella": "trial"})
	if err != nil {
		return nil, nil, err
	}
	metrics, err := tollgateprom.New(tollgateprom.WithStore(store))
	if err != nil {
		return nil, nil, err
	}
	prometheus.MustRegister(metrics)
	tracker, err := insights.New(insights.WithPlans(plans[:4])) // the plans a tenant can buy
	if err != nil {
		return nil, nil, err
	}
	opts := []tollgate.Option{tollgate.WithLogger(logger), tollgate.WithObserver(metrics), tollgate.WithObserver(tracker)}
	if os.Getenv("SHADOW") == "1" {
		opts = append(opts, tollgate.WithShadow()) // decide and record, never deny
	}
	limiter, err := tollgate.New(store, resolver, opts...)
	return limiter, tracker, err
}

func healthz(c *fiber.Ctx) error { return c.JSON(fiber.Map{"status": "ok"}) }

func hello(c *fiber.Ctx) error {
	return c.JSON(fiber.Map{"message": "hello, " + c.Locals(tenantKey).(string)})
}

// createReport stands in for expensive work: hence its cost, and a budget
// of its own, so that reports can not take a tenant's whole plan.
func createReport(c *fiber.Ctx) error {
	return c.Status(fiber.StatusAccepted).JSON(fiber.Map{"status": "queued", "tenant": c.Locals(tenantKey)})
}

// serve serves app on ADDR until SIGINT or SIGTERM, then lets the
// requests in flight finish.
func serve(logger *slog.Logger, app *fiber.App) error {
	ln, err := net.Listen("tcp", cmp.Or(os.Getenv("ADDR"), ":8080"))
	if err != nil {
		return err
	}
	logger.Info("listening", slog.String("addr", ln.Addr().String()))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stopped := make(chan error, 1)
	go func() {
		<-ctx.Done()
		stopped <- app.ShutdownWithTimeout(10 * time.Second)
	}()
	if err := app.Listener(ln); err != nil {
		return err
	}
	return <-stopped
}

// newStore returns where the limits live: in Redis when REDIS_URL is set,
// shared by every replica; in this process otherwise.
func newStore() (tollgate.Store, func(), error) {
	if os.Getenv("REDIS_URL") == "" {
		return memory.New(), func() {}, nil
	}
	opts, err := redis.ParseURL(os.Getenv("REDIS_URL"))
	if err != nil {
		// Not the parser's error: it would quote the password.
		return nil, nil, errors.New("REDIS_URL is not a valid redis:// URL")
	}
	logging.Disable() // go-redis's plain-text lines: tollgate logs the store's failures as JSON
	client := redis.NewClient(opts)
	store, err := redisstore.New(client)
	return store, func() { client.Close() }, err
}

// The plans, each with a budget of 50 report tokens an hour. A real
// application keeps its plans, and its tenants' plans, in its database and
// finds them through tollgate.NewCachingResolver.
var (
	reportsBudget = tollgate.Policy{Budget: "reports", Limit: tollgate.Limit{Rate: 50.0 / 3600, Burst: 50}} // five reports an hour
	daily30       = tollgate.Policy{Quota: tollgate.Quota{Tokens: 30, Period: tollgate.Daily}}
	plans         = []tollgate.Plan{
		{Name: "free", Limit: tollgate.Limit{Rate: 2, Burst: 20}, Policies: []tollgate.Policy{reportsBudget, slow(2)}},
		{Name: "startup", Limit: tollgate.Limit{Rate: 10, Burst: 100}, Policies: []tollgate.Policy{reportsBudget, slow(5)}},
		{Name: "growth", Limit: tollgate.Limit{Rate: 50, Burst: 500}, Policies: []tollgate.Policy{reportsBudget, slow(20)}},
		{Name: "enterprise", Limit: tollgate.Limit{Rate: 200, Burst: 2000}, Policies: []tollgate.Policy{reportsBudget, slow(100)}},
		{Name: "trial", Limit: tollgate.Limit{Rate: 5, Burst: 10}, Policies: []tollgate.Policy{daily30, reportsBudget}},
	}
)

// slow is the policy of GET /api/slow on a plan: at most n of a tenant's
// requests run at once, on every replica.
func slow(n int64) tollgate.Policy { return tollgate.Policy{Budget: "slow", InFlight: n} }

// work stands in for a long request, an export or a stream, which holds
// one of the tenant's slots in flight while it runs.
func work(c *fiber.Ctx) error {
	select {
	case <-time.After(time.Second):
		return c.JSON(fiber.Map{"status": "done"})
	case <-c.UserContext().Done():
		return c.UserContext().Err()
	}
}
