package tollgateecho_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adaptertest"
	"github.com/tollgate-go/tollgate/core/storetest"
	tollgateecho "github.com/tollgate-go/tollgate/echo"
)

// TestAllocs keeps the adapter from allocating on the allowed path beyond
// what the Limiter's decision and its headers take, and the closure that
// Echo v4 builds anew for every route middleware on every request. Run it
// without -race.
func TestAllocs(t *testing.T) {
	plan := tollgate.Plan{Name: "big", Limit: tollgate.Limit{Rate: 1e6, Burst: 1e9}}
	l, err := tollgate.New(storetest.NewModelStore(time.Now), tollgate.SinglePlan(plan), tollgate.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	status := func(c echo.Context) error { return c.NoContent(http.StatusOK) }
	bare := newEcho()
	bare.GET("/x", status)
	limited := newEcho()
	limited.GET("/x", status, tollgateecho.Middleware(l))
	adaptertest.CheckAllocs(t, l, bare, limited, 1)
}
