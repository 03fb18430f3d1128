package memory

import (
	"fmt"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// DefaultMaxKeys is the number of buckets a Store tracks unless WithMaxKeys
// says otherwise. A bucket takes about 50 bytes plus its key's length (63
// bytes for a 13-byte key; see docs/performance.md), so the default bounds a
// Store to some 60 to 100 MB.
const DefaultMaxKeys = 1_000_000

// DefaultSweepInterval is how often a Store drops buckets that are full again
// unless WithSweepInterval says otherwise.
const DefaultSweepInterval = 30 * time.Second

// An Option configures a Store. An invalid Option does not make New fail
// (New returns no error); it makes Check and every Take return an error that
// names it.
type Option func(*config)

type config struct {
	clock         func() time.Time
	maxKeys       int
	sweepInterval time.Duration
	err           error // the first invalid option
}

// fail records the first invalid option.
func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = &optionError{fmt.Sprintf(format, args...)}
	}
}

// An optionError names an invalid option. It wraps
// tollgate.ErrMisconfigured, on which tollgate.New fails.
type optionError struct{ msg string }

func (e *optionError) Error() string { return e.msg }
func (e *optionError) Unwrap() error { return tollgate.ErrMisconfigured }

// WithClock makes the Store read its time from now instead of the monotonic
// clock. It is meant for tests, with a clock that only moves when told; now
// must not be nil.
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now == nil {
			c.fail("memory: WithClock needs a clock, got nil")
			return
		}
		c.clock = now
	}
}

// WithMaxKeys caps the number of buckets the Store tracks; n must be >= 1.
//
// When a new key arrives at the cap, buckets that are full again go first
// (dropping them changes no decision). If that is not enough, buckets are
// evicted in order of the share of their burst that is spent, least first,
// an eighth of the cap at a time: the tenants closest to full lose the
// least. A bucket with half or more of its burst spent, which includes every
// tenant being throttled, is evicted only when its part of the Store holds
// nothing else. Evictions are counted in Stats; an evicted key starts again
// from a full bucket.
func WithMaxKeys(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.fail("memory: WithMaxKeys must be >= 1, got %d", n)
			return
		}
		c.maxKeys = n
	}
}

// WithSweepInterval sets how often a background goroutine drops the buckets
// that are full again; d <= 0 turns the goroutine off, leaving sweeps to
// happen only as tables grow.
func WithSweepInterval(d time.Duration) Option {
	return func(c *config) { c.sweepInterval = d }
}
