package storekit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tollgate-go/tollgate/core/storekit"
)

func TestBucketRuleInterval(t *testing.T) {
	cases := []struct {
		rate float64
		want int64
	}{
		{2, 500_000}, {10, 100_000}, {200, 5_000}, {0.1, 10_000_000}, {3, 333_334}, {1e6, 1}, {1.0 / 60, 60_000_000},
	}
	for _, c := range cases {
		if got := storekit.BucketRule(c.rate, 1).Interval; got != c.want {
			t.Errorf("rate %v: interval %dus, want %d", c.rate, got, c.want)
		}
	}
}

type neverCalled struct{ t *testing.T }

func (s neverCalled) Do(context.Context, *storekit.Op) error {
	s.t.Error("Do called for a cost the rule can never allow")
	return nil
}

func TestTakeRuleRejectsImpossibleCosts(t *testing.T) {
	rule := storekit.BucketRule(1, 10)
	for _, cost := range []int64{0, -1, 11} {
		if _, err := storekit.TakeRule(context.Background(), neverCalled{t}, "t", rule, cost); !errors.Is(err, storekit.ErrInvalid) {
			t.Errorf("cost %d: %v, want ErrInvalid", cost, err)
		}
	}
}
