package tollgategin_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adaptertest"
	"github.com/tollgate-go/tollgate/core/storetest"
	tollgategin "github.com/tollgate-go/tollgate/gin"
)

// TestAllocs keeps the adapter from allocating on the allowed path beyond
// what the Limiter's decision and its headers take. Run it without -race.
func TestAllocs(t *testing.T) {
	plan := tollgate.Plan{Name: "big", Limit: tollgate.Limit{Rate: 1e6, Burst: 1e9}}
	l, err := tollgate.New(storetest.NewModelStore(time.Now), tollgate.SinglePlan(plan), tollgate.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	status := func(c *gin.Context) { c.Status(http.StatusOK) }
	bare := gin.New()
	bare.GET("/x", status)
	limited := gin.New()
	limited.GET("/x", tollgategin.New(l), status)
	adaptertest.CheckAllocs(t, l, bare, limited, 0)
}
