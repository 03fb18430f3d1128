package tollgate_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/storetest"
)

func TestQuotaBounds(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skipf("no time zone database: %v", err)
	}
	utc := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cases := []struct {
		name       string
		q          tollgate.Quota
		at         string
		start, end string
	}{
		{"daily, mid-day", perDay(10), "2026-11-30T13:45:00Z", "2026-11-30T00:00:00Z", "2026-12-01T00:00:00Z"},
		{"daily, first instant", perDay(10), "2026-11-30T00:00:00Z", "2026-11-30T00:00:00Z", "2026-12-01T00:00:00Z"},
		{"daily, last microsecond", perDay(10), "2026-11-30T23:59:59.999999Z", "2026-11-30T00:00:00Z", "2026-12-01T00:00:00Z"},
		{"daily, year end", perDay(10), "2026-12-31T23:00:00Z", "2026-12-31T00:00:00Z", "2027-01-01T00:00:00Z"},
		{"monthly", tollgate.Quota{Tokens: 10, Period: tollgate.Monthly}, "2026-02-14T10:00:00Z", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"},
		{"monthly, anchor 15, before it", tollgate.Quota{Tokens: 1, Period: tollgate.Monthly, AnchorDay: 15}, "2026-01-14T23:59:59Z", "2025-12-15T00:00:00Z", "2026-01-15T00:00:00Z"},
		{"monthly, anchor 15, on it", tollgate.Quota{Tokens: 1, Period: tollgate.Monthly, AnchorDay: 15}, "2026-01-15T00:00:00Z", "2026-01-15T00:00:00Z", "2026-02-15T00:00:00Z"},
		// Paris springs forward on 2026-03-29: that day is 23 hours long.
		{"daily in Paris, short day", tollgate.Quota{Tokens: 1, Period: tollgate.Daily, Location: paris}, "2026-03-29T12:00:00Z", "2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z"},
		{"daily in Paris, before local midnight", tollgate.Quota{Tokens: 1, Period: tollgate.Daily, Location: paris}, "2026-11-30T22:59:59Z", "2026-11-29T23:00:00Z", "2026-11-30T23:00:00Z"},
		{"daily in Paris, at local midnight", tollgate.Quota{Tokens: 1, Period: tollgate.Daily, Location: paris}, "2026-11-30T23:00:00Z", "2026-11-30T23:00:00Z", "2026-12-01T23:00:00Z"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start, end := c.q.Bounds(utc(c.at))
			if !start.Equal(utc(c.start)) || !end.Equal(utc(c.end)) {
				t.Fatalf("Bounds(%s) = [%v, %v), want [%s, %s)", c.at, start.UTC(), end.UTC(), c.start, c.end)
			}
		})
	}
}

func TestQuotaValidate(t *testing.T) {
	cases := []struct {
		q     tollgate.Quota
		field string
	}{
		{tollgate.Quota{Period: tollgate.Daily}, "Tokens"},
		{tollgate.Quota{Tokens: -1, Period: tollgate.Daily}, "Tokens"},
		{tollgate.Quota{Tokens: 1e15, Period: tollgate.Daily}, "Tokens"},
		{tollgate.Quota{Tokens: 5}, "Period"},
		{tollgate.Quota{Tokens: 5, Period: 9}, "Period"},
		{tollgate.Quota{Tokens: 5, Period: tollgate.Daily, AnchorDay: 3}, "AnchorDay"},
		{tollgate.Quota{Tokens: 5, Period: tollgate.Monthly, AnchorDay: 29}, "AnchorDay"},
		{tollgate.Quota{Tokens: 5, Period: tollgate.Monthly, AnchorDay: -1}, "AnchorDay"},
	}
	for _, c := range cases {
		err := c.q.Validate()
		if !errors.Is(err, tollgate.ErrInvalidLimit) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%+v: Validate() = %v, want an ErrInvalidLimit naming %s", c.q, err, c.field)
		}
	}
	if err := (tollgate.Quota{Tokens: 5e6, Period: tollgate.Monthly}).Validate(); err != nil {
		t.Errorf("5e6 a month: %v", err)
	}
}

func perDay(n int64) tollgate.Quota { return tollgate.Quota{Tokens: n, Period: tollgate.Daily} }

func TestQuotasCompareLocationsByName(t *testing.T) {
	a, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skipf("no time zone database: %v", err)
	}
	b, _ := time.LoadLocation("Europe/Paris")
	if a == b {
		t.Skip("the time zone database returned the same *Location twice")
	}
	plan := func(loc *time.Location) tollgate.Plan {
		return tollgate.Plan{Name: "paris", Limit: tollgate.Limit{Rate: 1, Burst: 1},
			Policies: []tollgate.Policy{{Quota: tollgate.Quota{Tokens: 5, Period: tollgate.Daily, Location: loc}}}}
	}
	n := 0
	l, err := tollgate.New(storetest.NewModelStore(time.Now), tollgate.PlanResolverFunc(func(context.Context, string) (tollgate.Plan, error) {
		n++
		loc, _ := time.LoadLocation("Europe/Paris") // a new *Location each call
		return plan(loc), nil
	}), tollgate.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if _, err := l.Take(context.Background(), tollgate.Request{Tenant: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	if got := tollgate.CachedPlans(l); got != 1 {
		t.Errorf("%d plans compiled for 10 lookups of one plan, want 1: plans must compare time zones by name", got)
	}
}
