package tollgateechov5_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/labstack/echo/v5"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adaptertest"
	"github.com/tollgate-go/tollgate/core/storetest"
	tollgateechov5 "github.com/tollgate-go/tollgate/echov5"
)

// TestAllocs keeps the adapter from allocating on the allowed path beyond
// what the Limiter's decision and its headers take: Echo v5 builds its
// middleware chains once, so nothing else is allowed. Run it without -race.
func TestAllocs(t *testing.T) {
	plan := tollgate.Plan{Name: "big", Limit: tollgate.Limit{Rate: 1e6, Burst: 1e9}}
	l, err := tollgate.New(storetest.NewModelStore(time.Now), tollgate.SinglePlan(plan), tollgate.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	status := func(c *echo.Context) error { return c.NoContent(http.StatusOK) }
	bare := echo.New()
	bare.GET("/x", status)
	limited := echo.New()
	limited.GET("/x", status, tollgateechov5.Middleware(l))
	adaptertest.CheckAllocs(t, l, bare, limited, 0)
}
