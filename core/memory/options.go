package memory

import (
	"fmt"
	"time"

	"github.com/tollgate-go/tollgate/core/storekit"
)

// DefaultMaxKeys is the number of tenants a Store holds unless WithMaxKeys
// says otherwise.
const DefaultMaxKeys = 1_000_000

// DefaultSweepInterval is how often a Store drops the tenants whose limits
// are all full again, unless WithSweepInterval says otherwise.
const DefaultSweepInterval = 30 * time.Second

// An Option configures a Store. Options may come in any order. An invalid
// Option does not make New fail (New returns no error): it makes every Do
// and Take of the Store return an error that names it, and a Check Op (which
// tollgate.New makes) report it.
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
		c.err = fmt.Errorf("%w: "+format, append([]any{storekit.ErrMisconfigured}, args...)...)
	}
}

// WithClock makes the Store read its time from now instead of the system
// clock, for tests with a clock that moves only when told to. An Op whose
// Now is set is decided at that time all the same. now must not be nil.
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now == nil {
			c.fail("memory: WithClock needs a clock, got nil")
			return
		}
		c.clock = now
	}
}

// WithMaxKeys caps the number of tenants the Store holds; n must be >= 1.
//
// A new tenant that arrives at the cap makes room: first the tenants whose
// limits are all full again go (which changes no decision); if that frees
// less than an eighth of the part of the Store the new tenant falls in,
// tenants are evicted, those with the least of a limit spent first, up to
// that eighth. A tenant with two fifths or more of a limit spent, which
// includes every tenant being throttled, or with a request in flight, is
// evicted only when its part of the Store holds no other. An evicted tenant starts again with its limits
// full; Stats counts evictions.
func WithMaxKeys(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.fail("memory: WithMaxKeys must be >= 1, got %d", n)
			return
		}
		c.maxKeys = n
	}
}

// WithSweepInterval sets how often a background goroutine drops the tenants
// whose limits are all full again; d <= 0 turns the goroutine off, and
// tenants are then dropped only when the Store reaches its cap.
func WithSweepInterval(d time.Duration) Option {
	return func(c *config) { c.sweepInterval = d }
}
