package tollgate_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	tollgate "github.com/tollgate-go/tollgate/core"
)

func TestLimitValidateNamesTheField(t *testing.T) {
	cases := []struct {
		limit tollgate.Limit
		field string
	}{
		{tollgate.Limit{Rate: 0, Burst: 1}, "Rate"},
		{tollgate.Limit{Rate: -2, Burst: 1}, "Rate"},
		{tollgate.Limit{Rate: math.NaN(), Burst: 1}, "Rate"},
		{tollgate.Limit{Rate: math.Inf(1), Burst: 1}, "Rate"},
		{tollgate.Limit{Rate: 2e6, Burst: 1}, "Rate"},
		{tollgate.Limit{Rate: 1, Burst: 0}, "Burst"},
		{tollgate.Limit{Rate: 1, Burst: -5}, "Burst"},
		{tollgate.Limit{Rate: 1e-9, Burst: 1000}, "Burst/Rate"},
	}
	for _, c := range cases {
		err := c.limit.Validate()
		if !errors.Is(err, tollgate.ErrInvalidLimit) {
			t.Errorf("%+v: err = %v, want ErrInvalidLimit", c.limit, err)
			continue
		}
		if !strings.Contains(err.Error(), c.field) {
			t.Errorf("%+v: %q does not name %s", c.limit, err, c.field)
		}
	}
	for _, p := range tollgate.DefaultPlans() {
		if err := p.Validate(); err != nil {
			t.Errorf("default plan %s: %v", p.Name, err)
		}
	}
}
