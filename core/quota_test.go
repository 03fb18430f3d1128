package tollgate_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
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
		{"daily, mid-day", tollgate.PerDay(10), "2026-11-30T13:45:00Z", "2026-11-30T00:00:00Z", "2026-12-01T00:00:00Z"},
		{"daily, first instant", tollgate.PerDay(10), "2026-11-30T00:00:00Z", "2026-11-30T00:00:00Z", "2026-12-01T00:00:00Z"},
		{"daily, last microsecond", tollgate.PerDay(10), "2026-11-30T23:59:59.999999Z", "2026-11-30T00:00:00Z", "2026-12-01T00:00:00Z"},
		{"daily, year end", tollgate.PerDay(10), "2026-12-31T23:00:00Z", "2026-12-31T00:00:00Z", "2027-01-01T00:00:00Z"},
		{"monthly", tollgate.PerMonth(10), "2026-02-14T10:00:00Z", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"},
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
	if err := tollgate.PerMonth(5e6).Validate(); err != nil {
		t.Errorf("PerMonth(5e6): %v", err)
	}
	if err := tollgate.PerDay(30).CheckCost(31); !errors.Is(err, tollgate.ErrCostExceedsBurst) {
		t.Errorf("CheckCost above Tokens: %v", err)
	}
}
