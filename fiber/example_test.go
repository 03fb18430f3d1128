package tollgatefiber_test

import (
	"fmt"
	"log"
	"net/http/httptest"

	"github.com/gofiber/fiber/v2"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/tollgatehttp"
	tollgatefiber "github.com/tollgate-go/tollgate/fiber"
)

func ExampleNew() {
	// Two requests, then one a minute, for every tenant.
	plan := tollgate.Plan{Name: "free", Limit: tollgate.Limit{Rate: 1.0 / 60, Burst: 2}}
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(plan), tollgate.WithLogger(nil))
	if err != nil {
		log.Fatal(err)
	}

	app := fiber.New()
	app.Use(tollgatefiber.New(tollgatefiber.Config{Limiter: l}))
	app.Get("/api/hello", func(c *fiber.Ctx) error { return c.SendString("hello") })

	for range 3 {
		req := httptest.NewRequest("GET", "/api/hello", nil)
		req.Header.Set("X-Tenant-ID", "acme")
		resp, err := app.Test(req)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit"), resp.Header.Values("Retry-After"))
	}
	// Output:
	// 200 "free";r=1;t=60 []
	// 200 "free";r=0;t=60 []
	// 429 "free";r=0;t=60 [60]
}

// Report exports cost 10 tokens and also draw from a budget of their own,
// 50 tokens an hour; other API routes cost 1. The tenant is the one the
// application's authentication middleware put in c.Locals.
func ExampleNew_budget() {
	team := tollgate.Plan{Name: "team", Limit: tollgate.Limit{Rate: 2, Burst: 100},
		Policies: []tollgate.Policy{{Budget: "reports", Limit: tollgate.Limit{Rate: 50.0 / 3600, Burst: 50}}}}
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(team), tollgate.WithLogger(nil))
	if err != nil {
		log.Fatal(err)
	}
	authenticate := func(c *fiber.Ctx) error {
		c.Locals("tenant", "acme") // a real application checks a credential here
		return c.Next()
	}
	byPrincipal := tollgatefiber.TenantFromContext("tenant")

	app := fiber.New()
	app.Get("/healthz", func(c *fiber.Ctx) error { return nil }) // not limited
	api := app.Group("/api", authenticate)
	api.Get("/hello", tollgatefiber.New(tollgatefiber.Config{Limiter: l, Tenant: byPrincipal}),
		func(c *fiber.Ctx) error { return c.SendString("hello") })
	api.Post("/reports", tollgatefiber.New(tollgatefiber.Config{Limiter: l, Tenant: byPrincipal, Cost: 10, Budget: "reports"}),
		func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusAccepted) })

	resp, err := app.Test(httptest.NewRequest("POST", "/api/reports", nil))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
	fmt.Println(resp.Header.Get("RateLimit"))
	// Output:
	// 202 "team";q=100;w=50, "team-reports";q=50;w=3600
	// "team";r=90;t=1, "team-reports";r=40;t=72
}

// Anonymous clients are keyed by address, reading X-Forwarded-For from the
// right as the load balancers at 10.0.0.0/8 append to it. The app's own
// proxy settings (ProxyHeader, TrustedProxies) do not change whom the
// middleware believes.
func ExampleTenantFromClientIP() {
	proxies, err := tollgatehttp.ParsePrefixes("10.0.0.0/8")
	if err != nil {
		log.Fatal(err)
	}
	free := tollgate.DefaultPlans()[0]
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(free), tollgate.WithLogger(nil))
	if err != nil {
		log.Fatal(err)
	}
	app := fiber.New()
	app.Use(tollgatefiber.New(tollgatefiber.Config{Limiter: l, Tenant: tollgatefiber.TenantFromClientIP(proxies...)}))
	app.Get("/hello", func(c *fiber.Ctx) error { return c.SendString("hello") })
}
