package tollgate

import (
	"fmt"
	"math"
	"time"

	"github.com/tollgate-go/tollgate/core/storekit"
)

// Bounds of a valid Limit. Buckets count time in whole microseconds per
// token, so a million tokens a second is the finest refill; a burst has at
// most the 15 digits that RFC 9651 allows an integer in a structured header
// field; and refilling an empty bucket takes at most 100 years, which keeps
// every time the stores compute exact in the 53-bit numbers of the Redis
// script.
const (
	maxRate   = 1e6
	maxBurst  = 999_999_999_999_999
	maxWindow = 100 * 365 * 24 * time.Hour
)

// ErrInvalidLimit is wrapped by every error that reports a Limit, a Quota, a
// Plan or a request's cost that can never be valid. Use errors.Is to test
// for it.
var ErrInvalidLimit = storekit.ErrInvalid

// A Limit is a token bucket: Burst tokens of capacity, refilled at Rate tokens
// per second. A request that costs n tokens is allowed when n tokens are in the
// bucket. The zero Limit is invalid; see Validate.
type Limit struct {
	Rate  float64 // tokens per second, > 0 and at most a million
	Burst int64   // bucket capacity, >= 1 and at most 15 digits
}

// A Result is a store's answer to one request on one token bucket or quota.
type Result = storekit.Result

// Validate reports why l can not be used, naming the field at fault, or nil.
// Refilling an empty bucket (Burst/Rate) may take at most 100 years.
func (l Limit) Validate() error {
	switch {
	case math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0):
		return fmt.Errorf("%w: Rate must be a finite number, got %v", ErrInvalidLimit, l.Rate)
	case l.Rate <= 0:
		return fmt.Errorf("%w: Rate must be > 0 tokens per second, got %v", ErrInvalidLimit, l.Rate)
	case l.Rate > maxRate:
		return fmt.Errorf("%w: Rate must be at most %v tokens per second, got %v", ErrInvalidLimit, float64(maxRate), l.Rate)
	case l.Burst < 1:
		return fmt.Errorf("%w: Burst must be >= 1, got %d", ErrInvalidLimit, l.Burst)
	case l.Burst > maxBurst:
		return fmt.Errorf("%w: Burst must be at most %d (15 digits), got %d", ErrInvalidLimit, int64(maxBurst), l.Burst)
	case float64(l.Burst)/l.Rate > maxWindow.Seconds():
		return fmt.Errorf("%w: Burst/Rate (the time to refill an empty bucket) must be at most %v, got %.0fs",
			ErrInvalidLimit, maxWindow, float64(l.Burst)/l.Rate)
	}
	return nil
}

// checkCost reports whether a request of cost tokens can ever fit in a
// capacity of size tokens.
func checkCost(cost, size int64) error {
	if cost < 1 {
		return fmt.Errorf("%w: cost must be >= 1, got %d", ErrInvalidLimit, cost)
	}
	if cost > size {
		return fmt.Errorf("%w: cost %d is larger than the %d tokens the policy holds, so the request can never be allowed",
			ErrInvalidLimit, cost, size)
	}
	return nil
}

// rule returns the store's rule for l under name.
func (l Limit) rule(name string) storekit.Rule {
	r := storekit.BucketRule(l.Rate, l.Burst)
	r.Name = name
	return r
}

// String returns the limit as "<burst> burst at <rate>/s".
func (l Limit) String() string {
	return fmt.Sprintf("%d burst at %g/s", l.Burst, l.Rate)
}
