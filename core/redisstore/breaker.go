package redisstore

import (
	"sync"
	"sync/atomic"
)

// breaker is a circuit breaker over round trips to Redis. Closed, every call
// goes to Redis. After threshold failures in a row it opens: calls fail at
// once for backoff. Then it lets one call through as a probe; the probe's
// round trip closes it on success or opens it again on failure. A probe
// that never comes back (its caller gave up before it was sent) is replaced
// after the timeout. Times are local microseconds.
type breaker struct {
	threshold int64 // < 1: never opens
	backoff   int64
	timeout   int64

	state    atomic.Int32
	failures atomic.Int64 // consecutive failed round trips

	mu       sync.Mutex
	deadline int64 // open: until when; probing: when the probe counts as lost
	counted  int64 // when the latest failure was counted
}

const (
	breakerClosed int32 = iota
	breakerOpen
	breakerProbing
)

func (b *breaker) init(threshold int, backoff, timeout int64) {
	b.threshold, b.backoff, b.timeout = int64(threshold), backoff, timeout
}

// allow reports whether a call may go to Redis at now.
func (b *breaker) allow(now int64) bool {
	if b.state.Load() == breakerClosed {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state.Load() {
	case breakerOpen, breakerProbing:
		if now < b.deadline {
			return false
		}
		b.state.Store(breakerProbing)
		b.deadline = now + b.timeout
	}
	return true
}

// success records a round trip that Redis answered.
func (b *breaker) success() {
	if b.state.Load() == breakerClosed && b.failures.Load() == 0 {
		return
	}
	b.mu.Lock()
	b.failures.Store(0)
	b.state.Store(breakerClosed)
	b.mu.Unlock()
}

// failure records, at now, a round trip sent at sent that failed or missed
// a caller's deadline. Round trips that were already in flight when the
// previous failure was counted add nothing: a stall that makes every round
// trip in flight late at once (a pause of the client's own machine, a
// hiccup) is one failure, not as many as there were round trips, while a
// Redis that stays silent fails round trip after round trip.
func (b *breaker) failure(now, sent int64) {
	if b.threshold < 1 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if sent < b.counted && b.state.Load() != breakerProbing {
		return
	}
	b.counted = now
	n := b.failures.Add(1)
	if b.state.Load() == breakerProbing || n >= b.threshold {
		b.state.Store(breakerOpen)
		b.deadline = now + b.backoff
	}
}
