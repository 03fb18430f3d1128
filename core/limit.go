package tollgate

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// MaxRate is the highest Rate a Limit may have. Bucket arithmetic works in
// whole microseconds per token, so one token a microsecond is the finest
// refill the stores can represent.
const MaxRate = 1e6

// MaxBurst is the largest Burst a Limit may have: 15 digits, the most that
// RFC 9651 allows an integer in a structured header field such as
// RateLimit-Policy.
const MaxBurst = 999_999_999_999_999

// MaxWindow is the longest time a Limit may take to refill an empty bucket
// (Burst / Rate). It keeps every timestamp the stores compute exact in both
// 64-bit integers and the 53-bit numbers of the Redis script.
const MaxWindow = 100 * 365 * 24 * time.Hour

// ErrInvalidLimit is wrapped by every error that reports a Limit, a Plan or a
// cost that can never be valid. Use errors.Is to test for it.
var ErrInvalidLimit = errors.New("tollgate: invalid limit")

// ErrCostExceedsBurst is wrapped by the error returned when a request costs more
// tokens than the bucket holds: such a request could never be allowed, however
// long the caller waited, so it is reported instead of denied.
var ErrCostExceedsBurst = errors.New("tollgate: cost exceeds burst")

// A Limit is a token bucket: Burst tokens of capacity, refilled at Rate tokens
// per second. A request that costs n tokens is allowed when n tokens are in the
// bucket. The zero Limit is invalid; see Validate.
type Limit struct {
	Rate  float64 // tokens per second, > 0
	Burst int64   // bucket capacity, >= 1
}

// Validate reports why l can not be used, naming the field at fault, or nil.
func (l Limit) Validate() error {
	switch {
	case math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0):
		return fmt.Errorf("%w: Rate must be a finite number, got %v", ErrInvalidLimit, l.Rate)
	case l.Rate <= 0:
		return fmt.Errorf("%w: Rate must be > 0 tokens per second, got %v", ErrInvalidLimit, l.Rate)
	case l.Rate > MaxRate:
		return fmt.Errorf("%w: Rate must be at most %v tokens per second, got %v", ErrInvalidLimit, float64(MaxRate), l.Rate)
	case l.Burst < 1:
		return fmt.Errorf("%w: Burst must be >= 1, got %d", ErrInvalidLimit, l.Burst)
	case l.Burst > MaxBurst:
		return fmt.Errorf("%w: Burst must be at most %d (15 digits), got %d", ErrInvalidLimit, int64(MaxBurst), l.Burst)
	case float64(l.Burst)/l.Rate > MaxWindow.Seconds():
		return fmt.Errorf("%w: Burst/Rate (the time to refill an empty bucket) must be at most %v, got %.0fs",
			ErrInvalidLimit, MaxWindow, float64(l.Burst)/l.Rate)
	}
	return nil
}

// CheckCost reports whether a request of cost tokens can ever be allowed under
// l: cost must be >= 1 and at most l.Burst. l itself must be valid.
func (l Limit) CheckCost(cost int64) error {
	if cost < 1 {
		return fmt.Errorf("%w: cost must be >= 1, got %d", ErrInvalidLimit, cost)
	}
	if cost > l.Burst {
		return fmt.Errorf("%w: cost %d is larger than Burst %d, so the request can never be allowed",
			ErrCostExceedsBurst, cost, l.Burst)
	}
	return nil
}

// Window returns the time an empty bucket takes to refill completely.
func (l Limit) Window() time.Duration {
	return time.Duration(l.Burst) * time.Duration(l.TokenInterval()) * time.Microsecond
}

// TokenInterval returns the time, in whole microseconds, that the stores allow
// for one token to come back: 1e6/Rate rounded up, so that the long-run rate
// never exceeds Rate. Rates that divide a million (1, 2, 10, 50, 200, 1000 a
// second...) are exact; others are enforced within one microsecond per token.
func (l Limit) TokenInterval() int64 {
	t := 1e6 / l.Rate
	n := int64(t) // t >= 1 for a valid limit, so this rounds down
	// A rate such as 0.1/s can land a hair above a whole number in
	// floating point; that must not cost it a microsecond.
	if t-float64(n) <= 1e-9*t {
		return n
	}
	return n + 1
}

// String returns the limit as "<burst> burst at <rate>/s".
func (l Limit) String() string {
	return fmt.Sprintf("%d burst at %g/s", l.Burst, l.Rate)
}
