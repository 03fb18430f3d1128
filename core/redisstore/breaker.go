package redisstore

import (
	"sync"
	"sync/atomic"
	"time"
)

// A breaker is a circuit breaker over the round trips to one server.
// Closed, every call goes out. After threshold failed round trips in a row
// it opens: calls fail at once for backoff. Then it lets one call through
// as a probe, and the probe's round trip closes it or opens it again. A
// probe whose caller gave up before it was sent never comes back, so after
// probeTimeout another call may probe.
type breaker struct {
	threshold    int64 // < 1: never opens
	backoff      time.Duration
	probeTimeout time.Duration

	tripped  atomic.Bool  // open or probing: calls are refused
	failures atomic.Int64 // failed round trips in a row
	opens    atomic.Uint64

	mu      sync.Mutex
	probing bool
	until   time.Time // open: when a probe may go; probing: when it counts as lost
}

func (b *breaker) init(threshold int, backoff, probeTimeout time.Duration) {
	b.threshold, b.backoff, b.probeTimeout = int64(threshold), backoff, probeTimeout
}

// allow reports whether a call may go to the server at now.
func (b *breaker) allow(now time.Time) bool {
	if !b.tripped.Load() {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.tripped.Load() {
		return true
	}
	if now.Before(b.until) {
		return false
	}
	b.probing, b.until = true, now.Add(b.probeTimeout)
	return true
}

// record counts a round trip that came back at now: ok if Redis answered
// it, with a reply or an error reply.
func (b *breaker) record(now time.Time, ok bool) {
	if b.threshold < 1 || (ok && b.failures.Load() == 0 && !b.tripped.Load()) {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if ok {
		b.failures.Store(0)
		b.tripped.Store(false)
		b.probing = false
		return
	}
	n := b.failures.Add(1)
	if b.probing || (!b.tripped.Load() && n >= b.threshold) {
		if !b.tripped.Load() {
			b.opens.Add(1)
		}
		b.tripped.Store(true)
		b.probing, b.until = false, now.Add(b.backoff)
	}
}

// isOpen reports whether calls are refused now.
func (b *breaker) isOpen() bool { return b.tripped.Load() }

func (b *breaker) stats() (open bool, opens uint64) { return b.tripped.Load(), b.opens.Load() }
