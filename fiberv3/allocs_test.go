package tollgatefiberv3_test

import (
	"context"
	"net"
	"testing"

	"github.com/gofiber/fiber/v3"
	"github.com/valyala/fasthttp"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adaptertest"
	tollgatefiberv3 "github.com/tollgate-go/tollgate/fiberv3"
)

// TestAllocs keeps the adapter's own allocations on the allowed path to two,
// the copy of the tenant ID and the rate-limit header values: a request
// through Fiber with the middleware may allocate what Fiber and the
// Limiter's decision allocate, and two more.
func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	plan := tollgate.Plan{Name: "big", Limit: tollgate.Limit{Rate: 1e6, Burst: 1e9}}
	l, _, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(plan))
	engine := testing.AllocsPerRun(100, func() {
		var d tollgate.Decision
		l.Decide(context.Background(), &tollgate.Request{Tenant: "acme", Method: "GET", Route: "/x"}, &d)
	})
	serve := func(mw ...fiber.Handler) float64 {
		app := fiber.New()
		if len(mw) > 0 {
			app.Use(mw[0])
		}
		app.Get("/x", func(c fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
		handler := app.Handler()
		var req fasthttp.Request
		req.Header.SetMethod(fasthttp.MethodGet)
		req.SetRequestURI("/x")
		req.Header.Set("X-Tenant-ID", "acme")
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}, nil)
		allocs := testing.AllocsPerRun(100, func() {
			ctx.Response.Reset()
			handler(&ctx)
		})
		if s := ctx.Response.StatusCode(); s != fiber.StatusOK {
			t.Fatalf("status %d", s)
		}
		return allocs
	}
	bare := serve()
	limited := serve(tollgatefiberv3.New(tollgatefiberv3.Config{Limiter: l}))
	if added := limited - bare - engine; added > 2 {
		t.Errorf("the adapter allocates %v times a request beyond Fiber (%v) and the Limiter (%v), want at most 2", added, bare, engine)
	}
}
