package tollgate

import (
	"fmt"
	"time"
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
// period starts, and tokens left at the end of a period are lost. A quota
// is counted in fixed periods, so it suits billing ("1,000 requests a day",
// "5 million a month"); a Limit suits protecting the service.
//
// The zero Quota is no quota.
type Quota struct {
	Tokens int64  // the allowance of one period, >= 1
	Period Period // Daily or Monthly

	// Location is the calendar the periods follow; nil means UTC. A day
	// that a daylight-saving change shortens or lengthens is still one
	// period.
	Location *time.Location

	// AnchorDay is the day of the month a Monthly period starts on, 1 to
	// 28 (a billing date that every month has); 0 means 1. It must be 0
	// for Daily quotas.
	AnchorDay int
}

// PerDay returns a Quota of n tokens a day, in UTC.
func PerDay(n int64) Quota { return Quota{Tokens: n, Period: Daily} }

// PerMonth returns a Quota of n tokens a calendar month, in UTC.
func PerMonth(n int64) Quota { return Quota{Tokens: n, Period: Monthly} }

// IsZero reports whether q is the zero Quota, which is no quota.
func (q Quota) IsZero() bool { return q == Quota{} }

// Validate reports why q can not be used, naming the field at fault, or nil.
func (q Quota) Validate() error {
	switch {
	case q.Tokens < 1:
		return fmt.Errorf("%w: Quota.Tokens must be >= 1, got %d", ErrInvalidLimit, q.Tokens)
	case q.Tokens > MaxBurst:
		return fmt.Errorf("%w: Quota.Tokens must be at most %d (15 digits), got %d", ErrInvalidLimit, int64(MaxBurst), q.Tokens)
	case q.Period != Daily && q.Period != Monthly:
		return fmt.Errorf("%w: Quota.Period must be Daily or Monthly, got %v", ErrInvalidLimit, q.Period)
	case q.Period == Daily && q.AnchorDay != 0:
		return fmt.Errorf("%w: Quota.AnchorDay applies to Monthly quotas only, got %d on a Daily one", ErrInvalidLimit, q.AnchorDay)
	case q.AnchorDay < 0 || q.AnchorDay > 28:
		return fmt.Errorf("%w: Quota.AnchorDay must be 1 to 28 (0 means 1), got %d", ErrInvalidLimit, q.AnchorDay)
	}
	return nil
}

// CheckCost reports whether a request of cost tokens can ever be allowed
// under q: cost must be >= 1 and at most q.Tokens. q itself must be valid.
func (q Quota) CheckCost(cost int64) error {
	if cost < 1 {
		return fmt.Errorf("%w: cost must be >= 1, got %d", ErrInvalidLimit, cost)
	}
	if cost > q.Tokens {
		return fmt.Errorf("%w: cost %d is larger than Quota.Tokens %d, so the request can never be allowed",
			ErrCostExceedsBurst, cost, q.Tokens)
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
		start = time.Date(y, m, d, 0, 0, 0, 0, loc)
		// time.Date normalises day 32 and the like, and finds
		// midnight even on a day a daylight-saving change makes 23
		// or 25 hours long.
		return start, time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	}
	anchor := max(q.AnchorDay, 1)
	if d < anchor {
		m--
	}
	return time.Date(y, m, anchor, 0, 0, 0, 0, loc), time.Date(y, m+1, anchor, 0, 0, 0, 0, loc)
}

// String returns the quota as "<tokens> <period>" with the location and
// anchor day when they are not the defaults, e.g. "1000 daily" or
// "5000000 monthly from day 15 in Europe/Paris".
func (q Quota) String() string {
	s := fmt.Sprintf("%d %v", q.Tokens, q.Period)
	if q.AnchorDay > 1 {
		s += fmt.Sprintf(" from day %d", q.AnchorDay)
	}
	if q.Location != nil && q.Location != time.UTC {
		s += " in " + q.Location.String()
	}
	return s
}
