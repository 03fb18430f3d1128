package tollgate

import (
	"time"

	"github.com/tollgate-go/tollgate/core/internal/testhooks"
)

func init() {
	testhooks.LimiterClock = func(now func() time.Time) any { return withClock(now) }
}
