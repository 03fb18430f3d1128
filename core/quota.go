package tollgate

import (
	"fmt"
	"time"

	"github.com/tollgate-go/tollgate/core/storekit"
)

// A Period is the calendar period of a Quota.
type Period uint8

const (
	// Daily periods start at midnight in the quota's Location.
	Daily Period = iota + 1
	// Monthly periods start at midnight on the quota's AnchorDay of each
	// month, in its Location.
	Monthly
)

// String returns "daily" or "monthly".
func (p Period) String() string {
	switch p {
	case Daily:
		return "daily"
	case Monthly:
		return "monthly"
	}
	return fmt.Sprintf("Period(%d)", int(p))
}

// A Quota is a calendar quota: at most Tokens tokens in each calendar
// period, a day or a month of Location's calendar. Unlike a Limit, a quota
// does not refill gradually: its whole allowance comes back at once when a
// period starts, and tokens left at the end of a period are lost. It suits
// billing ("1,000 requests a day"); a Limit suits protecting the service.
//
// A tenant's use of a quota is kept under the policy's name, not per period
// or per plan: a tenant moved to another plan, or to a calendar in another
// time zone, keeps what it used until the period it is in ends.
//
// The zero Quota is no quota.
type Quota struct {
	Tokens int64  // the allowance of one period, >= 1
	Period Period // Daily or Monthly

	// Location is the calendar the periods follow; nil means UTC. Two
	// quotas with locations of the same name are the same quota. A day
	// that a daylight-saving change shortens or lengthens is still one
	// period.
	Location *time.Location

	// AnchorDay is the day of the month a Monthly period starts on, 1 to
	// 28 (a billing date that every month has); 0 means 1. It must be 0
	// for Daily quotas.
	AnchorDay int
}

// IsZero reports whether q is the zero Quota, which is no quota.
func (q Quota) IsZero() bool { return q == Quota{} }

// equal reports whether q and o are the same quota, comparing locations by
// name: a resolver that loads a time zone on every call gives a new
// *time.Location each time.
func (q Quota) equal(o Quota) bool {
	return q.Tokens == o.Tokens && q.Period == o.Period && q.AnchorDay == o.AnchorDay &&
		q.locationName() == o.locationName()
}

func (q Quota) locationName() string {
	if q.Location == nil {
		return "UTC"
	}
	return q.Location.String()
}

// Validate reports why q can not be used, naming the field at fault, or nil.
func (q Quota) Validate() error {
	switch {
	case q.Tokens < 1:
		return fmt.Errorf("%w: Quota.Tokens must be >= 1, got %d", ErrInvalidLimit, q.Tokens)
	case q.Tokens > maxBurst:
		return fmt.Errorf("%w: Quota.Tokens must be at most %d (15 digits), got %d", ErrInvalidLimit, int64(maxBurst), q.Tokens)
	case q.Period != Daily && q.Period != Monthly:
		return fmt.Errorf("%w: Quota.Period must be Daily or Monthly, got %v", ErrInvalidLimit, q.Period)
	case q.Period == Daily && q.AnchorDay != 0:
		return fmt.Errorf("%w: Quota.AnchorDay applies to Monthly quotas only, got %d on a Daily one", ErrInvalidLimit, q.AnchorDay)
	case q.AnchorDay < 0 || q.AnchorDay > 28:
		return fmt.Errorf("%w: Quota.AnchorDay must be 1 to 28 (0 means 1), got %d", ErrInvalidLimit, q.AnchorDay)
	}
	return nil
}

// Bounds returns the period of q that holds t: it starts at start and ends
// at end, exclusive. q must be valid.
func (q Quota) Bounds(t time.Time) (start, end time.Time) {
	loc := q.Location
	if loc == nil {
		loc = time.UTC
	}
	y, m, d := t.In(loc).Date()
	if q.Period == Daily {
		// time.Date normalises day 32 and the like, and finds midnight
		// even on a day a daylight-saving change makes 23 or 25 hours
		// long.
		return time.Date(y, m, d, 0, 0, 0, 0, loc), time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	}
	anchor := max(q.AnchorDay, 1)
	if d < anchor {
		m--
	}
	return time.Date(y, m, anchor, 0, 0, 0, 0, loc), time.Date(y, m+1, anchor, 0, 0, 0, 0, loc)
}

// rule returns the store's rule for q under name.
func (q Quota) rule(name string) storekit.Rule {
	return storekit.Rule{Kind: storekit.Quota, Name: name, Burst: q.Tokens, Period: q.Bounds}
}

// String returns the quota as "<tokens> <period>" with the location and
// anchor day when they are not the defaults, e.g. "1000 daily" or
// "5000000 monthly from day 15 in Europe/Paris".
func (q Quota) String() string {
	s := fmt.Sprintf("%d %v", q.Tokens, q.Period)
	if q.AnchorDay > 1 {
		s += fmt.Sprintf(" from day %d", q.AnchorDay)
	}
	if name := q.locationName(); name != "UTC" {
		s += " in " + name
	}
	return s
}
