package tollgatefiberv3_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"

	"github.com/gofiber/fiber/v3"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	tollgatefiberv3 "github.com/tollgate-go/tollgate/fiberv3"
)

func ExampleNew() {
	// Every tenant gets a burst of 2 requests, refilled at 1 a second.
	plan := tollgate.Plan{Name: "free", Limit: tollgate.Limit{Rate: 1, Burst: 2}}
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(plan), tollgate.WithLogger(nil))
	if err != nil {
		panic(err)
	}
	app := fiber.New()
	app.Get("/hello", tollgatefiberv3.New(tollgatefiberv3.Config{Limiter: l}), func(c fiber.Ctx) error {
		return c.SendString("hello")
	})

	var resp *http.Response
	var body []byte
	for range 3 {
		req := httptest.NewRequest("GET", "/hello", nil)
		req.Header.Set("X-Tenant-ID", "acme")
		resp, err = app.Test(req)
		if err != nil {
			panic(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	fmt.Println("Retry-After:", resp.Header.Get("Retry-After"))
	fmt.Println(string(body))
	// Output:
	// 200 "free";r=1;t=1
	// 200 "free";r=0;t=1
	// 429 "free";r=0;t=1
	// Retry-After: 1
	// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"rate limit exceeded (free): retry in 1s","violated-policies":["free"],"error":"rate_limited","message":"rate limit exceeded (free): retry in 1s","retry_after":1,"policy":"free"}
}

// The tenant usually comes from the authenticated principal, which the
// application's authentication middleware keeps in c.Locals; routes that
// cost more get a handler of their own.
func ExampleTenantFromContext() {
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(tollgate.Plan{Name: "free", Limit: tollgate.Limit{Rate: 2, Burst: 20}}), tollgate.WithLogger(nil))
	if err != nil {
		panic(err)
	}
	type principal struct{}
	byPrincipal := tollgatefiberv3.TenantFromContext(principal{})

	app := fiber.New()
	api := app.Group("/api", func(c fiber.Ctx) error {
		// Stands in for real authentication.
		if c.Get("Authorization") == "Bearer secret-of-acme" {
			c.Locals(principal{}, "acme")
		}
		return c.Next()
	})
	api.Get("/hello", tollgatefiberv3.New(tollgatefiberv3.Config{Limiter: l, Tenant: byPrincipal}), func(c fiber.Ctx) error {
		return c.SendString("hello")
	})
	api.Post("/reports", tollgatefiberv3.New(tollgatefiberv3.Config{Limiter: l, Tenant: byPrincipal, Cost: 10}), func(c fiber.Ctx) error {
		return c.SendStatus(http.StatusCreated)
	})

	for _, r := range []struct{ method, path, auth string }{
		{"GET", "/api/hello", "Bearer secret-of-acme"},
		{"POST", "/api/reports", "Bearer secret-of-acme"},
		{"GET", "/api/hello", ""},
	} {
		req := httptest.NewRequest(r.method, r.path, nil)
		if r.auth != "" {
			req.Header.Set("Authorization", r.auth)
		}
		resp, err := app.Test(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(r.method, r.path, resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"))
	}
	// Output:
	// GET /api/hello 200 19
	// POST /api/reports 201 9
	// GET /api/hello 401
}

// Behind a load balancer, name it as a trusted proxy: only then is the
// client address read from X-Forwarded-For.
func ExampleTenantFromClientIP() {
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(tollgate.Plan{Name: "anonymous", Limit: tollgate.Limit{Rate: 1, Burst: 5}}), tollgate.WithLogger(nil))
	if err != nil {
		panic(err)
	}
	loadBalancer := netip.MustParsePrefix("127.0.0.1/32") // in production, say 10.0.0.0/8
	app := fiber.New()
	app.Use(tollgatefiberv3.New(tollgatefiberv3.Config{
		Limiter: l,
		Tenant:  tollgatefiberv3.TenantFromClientIP(loadBalancer),
		LimitReached: func(c fiber.Ctx, d tollgate.Decision) error {
			return c.Status(http.StatusTooManyRequests).SendString("slow down, " + d.Tenant)
		},
	}))
	app.Get("/hello", func(c fiber.Ctx) error { return c.SendString("hello") })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true})
	defer app.Shutdown()

	var last string
	for range 6 {
		req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/hello", nil)
		req.Header.Set("X-Forwarded-For", "198.51.100.7")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		last = fmt.Sprint(resp.StatusCode, " ", strings.TrimSpace(string(b)))
	}
	fmt.Println(last)
	// Output:
	// 429 slow down, 198.51.100.7
}
