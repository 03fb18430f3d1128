package tollgatefiber_test

import (
	"fmt"
	"log"
	"net/http/httptest"

	"github.com/gofiber/fiber/v2"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	tollgatefiber "github.com/tollgate-go/tollgate/fiber"
)

func ExampleNew() {
	// Two requests, then one a minute, for every tenant.
	plan := tollgate.Plan{Name: "free", Limit: tollgate.PerMinute(1, 2)}
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
	// 200 "free";r=0;t=120 []
	// 429 "free";r=0;t=120 [60]
}

// A report costs 10 tokens, other API routes 1; the tenant is the one the
// application's authentication middleware put in c.Locals.
func ExampleNew_perRouteCost() {
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(tollgate.Growth), tollgate.WithLogger(nil))
	if err != nil {
		log.Fatal(err)
	}
	authenticate := func(c *fiber.Ctx) error {
		c.Locals("tenant", "acme") // a real application checks a credential here
		return c.Next()
	}
	byPrincipal := tollgatefiber.TenantFromLocals("tenant")

	app := fiber.New()
	app.Get("/healthz", func(c *fiber.Ctx) error { return nil }) // not limited
	api := app.Group("/api", authenticate)
	api.Get("/hello", tollgatefiber.New(tollgatefiber.Config{Limiter: l, Tenant: byPrincipal}),
		func(c *fiber.Ctx) error { return c.SendString("hello") })
	api.Post("/reports", tollgatefiber.New(tollgatefiber.Config{Limiter: l, Tenant: byPrincipal, Cost: 10}),
		func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusCreated) })

	resp, err := app.Test(httptest.NewRequest("POST", "/api/reports", nil))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"))
	// Output:
	// 201 490
}

// Anonymous clients are limited by address. Fiber's proxy settings decide
// whom to believe: here X-Real-IP, set by the load balancers at 10.0.0.0/8.
func ExampleTenantFromIP() {
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(tollgate.Free), tollgate.WithLogger(nil))
	if err != nil {
		log.Fatal(err)
	}
	app := fiber.New(fiber.Config{
		ProxyHeader:             "X-Real-Ip",
		EnableTrustedProxyCheck: true,
		TrustedProxies:          []string{"10.0.0.0/8"},
		EnableIPValidation:      true,
	})
	app.Use(tollgatefiber.New(tollgatefiber.Config{Limiter: l, Tenant: tollgatefiber.TenantFromIP()}))
}

// Anonymous clients are limited by address, reading X-Forwarded-For from the
// right as the load balancers at 10.0.0.0/8 append to it.
func ExampleTenantFromClientIP() {
	proxies, err := tollgate.ParsePrefixes("10.0.0.0/8")
	if err != nil {
		log.Fatal(err)
	}
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(tollgate.Free), tollgate.WithLogger(nil))
	if err != nil {
		log.Fatal(err)
	}
	app := fiber.New()
	app.Use(tollgatefiber.New(tollgatefiber.Config{Limiter: l, Tenant: tollgatefiber.TenantFromClientIP(proxies...)}))
}
