package tollgatefiberv3_test

import (
	"net"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/valyala/fasthttp"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adapterkit"
	"github.com/tollgate-go/tollgate/core/adaptertest"
	"github.com/tollgate-go/tollgate/core/storetest"
	tollgatefiberv3 "github.com/tollgate-go/tollgate/fiberv3"
)

// TestAllocs keeps the adapter's own allocations on the allowed path to
// one, the copy of the tenant ID that Fiber's buffers would otherwise
// overwrite: a request through Fiber with the middleware may allocate what
// Fiber allocates, what the Limiter's decision and its header values take,
// and that one. (adaptertest.CheckAllocs is for net/http frameworks.) Run
// it without -race.
func TestAllocs(t *testing.T) {
	plan := tollgate.Plan{Name: "big", Limit: tollgate.Limit{Rate: 1e6, Burst: 1e9}}
	l, err := tollgate.New(storetest.NewModelStore(time.Now), tollgate.SinglePlan(plan), tollgate.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	decision := adaptertest.DecisionAllocs(t, l, func(d *tollgate.Decision) {
		adapterkit.VisitHeaders(d, func(string, string) {})
	})
	serve := func(mw ...fiber.Handler) float64 {
		app := fiber.New()
		for _, h := range mw {
			app.Use(h)
		}
		app.Get("/x", func(c fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
		handler := app.Handler()
		var req fasthttp.Request
		req.Header.SetMethod(fasthttp.MethodGet)
		req.SetRequestURI("/x")
		req.Header.Set(adapterkit.TenantHeader, "acme")
		var rc fasthttp.RequestCtx
		rc.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}, nil)
		allocs := adaptertest.AllocsPerRun(t, 200, func() {
			rc.Response.Reset()
			handler(&rc)
		})
		if rc.Response.StatusCode() != fiber.StatusOK || len(mw) > 0 && len(rc.Response.Header.Peek(adapterkit.HeaderRemaining)) == 0 {
			t.Fatalf("status %d, headers\n%s\nwant 200 with rate-limit headers", rc.Response.StatusCode(), rc.Response.Header.String())
		}
		return allocs
	}
	bare := serve()
	limited := serve(tollgatefiberv3.New(tollgatefiberv3.Config{Limiter: l}))
	t.Logf("allocations a request: %v bare, %v limited; the decision and its headers %v", bare, limited, decision)
	if own := limited - bare - decision; own > 1 {
		t.Errorf("the adapter allocates %v times a request of its own, want at most 1 (the tenant's copy)", own)
	}
}
