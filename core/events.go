package tollgate

import (
	"context"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// A ThrottleEvent reports one denied request: the Decision, with the
// request's method and route.
type ThrottleEvent struct {
	Decision
	Method string
	Route  string
}

// NewThrottleLogger returns a throttle hook for WithOnThrottle that writes
// one structured line per throttled request to logger, at level Warn, with
// tenant_id, plan, policy (the one that denied), limit and rate (its burst
// and rate, or its quota and period), cost, budget, remaining,
// retry_after_ms, method and route. In shadow mode (WithShadow) the message
// says that the request would have been throttled.
//
// Lines are sampled per tenant: at most one per tenant per interval, carrying
// in "suppressed" how many throttled requests of that tenant went unlogged
// since the previous line. When a tenant stops being throttled, a last line
// "throttled requests not logged" reports what its final interval held; it
// is written by the next throttled request of any tenant an interval later,
// and, for the logger a Limiter makes itself (WithLogger), by its next
// decision of any kind. A tenant flooding the API thus costs one line an
// interval, and its volume is still on record. The hook is safe for
// concurrent use.
//
// The log of a Limiter's own (WithLogger) also writes, at level Info and
// sampled the same way, a line "request delayed" with delay_ms for each
// request granted after a wait (Request.MaxDelay, Limiter.Wait, the delay
// mode of the middleware), and "delayed requests not logged" when such a
// tenant goes quiet.
func NewThrottleLogger(logger *slog.Logger, interval time.Duration) func(context.Context, ThrottleEvent) {
	return newThrottleLog(logger, interval).log
}

// A throttleLog is the sampled log of throttled requests, and of delayed
// ones for the Limiter's own log.
type throttleLog struct {
	logger  *slog.Logger
	sampler *sampler
	delays  *sampler // nil but in the Limiter's own log
}

func newThrottleLog(logger *slog.Logger, interval time.Duration) *throttleLog {
	t := &throttleLog{logger: logger}
	t.sampler = newSampler(interval, func(tenant string, suppressed int64) {
		logger.LogAttrs(context.Background(), slog.LevelWarn, "throttled requests not logged",
			slog.String("tenant_id", tenant),
			slog.Int64("suppressed", suppressed),
		)
	})
	return t
}

// withDelays makes t log delayed requests too (see logDelayed).
func (t *throttleLog) withDelays() *throttleLog {
	interval := t.sampler.interval
	t.delays = newSampler(interval, func(tenant string, suppressed int64) {
		t.logger.LogAttrs(context.Background(), slog.LevelInfo, "delayed requests not logged",
			slog.String("tenant_id", tenant),
			slog.Int64("suppressed", suppressed),
		)
	})
	return t
}

// logDelayed writes one line for a request granted after a wait (its
// Decision has a Delay: Request.MaxDelay, Wait, the delay mode of the
// middleware), sampled per tenant as throttled requests are, at level Info:
// a delay is the limiter pacing a client as designed, not a refusal. The
// line has the fields of a throttle line, with delay_ms in place of
// retry_after_ms.
func (t *throttleLog) logDelayed(ctx context.Context, req *Request, d *Decision) {
	log, suppressed := t.delays.admit(d.Tenant, d.Time)
	if !log {
		return
	}
	limit, rate := policyFigures(d)
	t.logger.LogAttrs(ctx, slog.LevelInfo, "request delayed",
		slog.String("tenant_id", d.Tenant),
		slog.String("plan", d.Plan.Name),
		slog.String("policy", d.Policy),
		slog.Int64("limit", limit),
		rate,
		slog.Int64("cost", d.Cost),
		slog.String("budget", d.Budget),
		slog.Int64("remaining", d.Remaining),
		slog.Int64("delay_ms", d.Delay.Milliseconds()),
		slog.String("method", req.Method),
		slog.String("route", req.route()),
		slog.Int64("suppressed", suppressed),
	)
}

func (t *throttleLog) log(ctx context.Context, e ThrottleEvent) {
	log, suppressed := t.sampler.admit(e.Tenant, e.Time)
	if !log {
		return
	}
	limit, rate := policyFigures(&e.Decision)
	msg := "request throttled"
	if e.Shadow {
		// Shadow mode let it through: the line says what enforcing
		// would have done.
		msg = "request would be throttled (shadow mode)"
	}
	t.logger.LogAttrs(ctx, slog.LevelWarn, msg,
		slog.String("tenant_id", e.Tenant),
		slog.String("plan", e.Plan.Name),
		slog.String("policy", e.Policy),
		slog.Int64("limit", limit),
		rate,
		slog.Int64("cost", e.Cost),
		slog.String("budget", e.Budget),
		slog.Int64("remaining", e.Remaining),
		slog.Int64("retry_after_ms", e.RetryAfter.Milliseconds()),
		slog.String("method", e.Method),
		slog.String("route", e.Route),
		slog.Int64("suppressed", suppressed),
	)
}

// policyFigures returns the size of the policy d.Policy names (a burst or a
// quota's tokens) and its rate: tokens a second, or a quota's period.
func policyFigures(d *Decision) (int64, slog.Attr) {
	for _, p := range d.Policies() {
		if p.Name != d.Policy {
			continue
		}
		if !p.Quota.IsZero() {
			return p.Quota.Tokens, slog.String("rate", p.Quota.Period.String())
		}
		return p.Limit.Burst, slog.Float64("rate", p.Limit.Rate)
	}
	return d.Plan.Limit.Burst, slog.Float64("rate", d.Plan.Limit.Rate)
}

// A sampler admits at most one event per key per interval and counts the
// rest. Counts left over when a key goes quiet are handed to flush by the
// first call of admit or flushQuiet an interval later, on any key. It tracks
// a bounded number of keys: past the bound it forgets them all, which at
// worst logs one extra line per key.
type sampler struct {
	interval  time.Duration
	flush     func(key string, suppressed int64)
	seed      maphash.Seed
	pending   atomic.Int64 // suppressed events not yet reported
	lastSweep atomic.Int64 // Unix nanoseconds
	shards    [16]samplerShard
}

type samplerShard struct {
	mu   sync.Mutex
	keys map[string]*sampleState
}

type sampleState struct {
	logged     time.Time // when the key's last line was admitted
	seen       time.Time // when the key's last event came
	suppressed int64
}

const maxSampledKeysPerShard = 4096

func newSampler(interval time.Duration, flush func(key string, suppressed int64)) *sampler {
	s := &sampler{interval: interval, flush: flush, seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].keys = make(map[string]*sampleState)
	}
	return s
}

// admit reports whether the event of key at now is to be logged and, if so,
// how many events of key were suppressed since the last one logged.
func (s *sampler) admit(key string, now time.Time) (bool, int64) {
	s.flushQuiet(now)
	sh := &s.shards[maphash.String(s.seed, key)%uint64(len(s.shards))]
	sh.mu.Lock()
	log, suppressed := sh.admit(key, now, s.interval)
	sh.mu.Unlock()
	if log {
		s.pending.Add(-suppressed)
	} else {
		s.pending.Add(1)
	}
	return log, suppressed
}

// flushQuiet reports the suppressed counts of keys quiet for an interval.
// It is cheap enough to call on every request: one atomic load while
// nothing is pending.
func (s *sampler) flushQuiet(now time.Time) {
	if s.pending.Load() == 0 {
		return
	}
	last := s.lastSweep.Load()
	if now.UnixNano()-last < int64(s.interval) || !s.lastSweep.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		quiet := sh.sweep(now, s.interval)
		sh.mu.Unlock()
		for _, f := range quiet {
			s.pending.Add(-f.suppressed)
			if s.flush != nil {
				s.flush(f.key, f.suppressed)
			}
		}
	}
}

func (sh *samplerShard) admit(key string, now time.Time, interval time.Duration) (bool, int64) {
	st, ok := sh.keys[key]
	if ok && now.Sub(st.logged) < interval {
		st.suppressed++
		st.seen = now
		return false, 0
	}
	if !ok {
		if len(sh.keys) >= maxSampledKeysPerShard {
			clear(sh.keys)
		}
		sh.keys[key] = &sampleState{logged: now, seen: now}
		return true, 0
	}
	suppressed := st.suppressed
	st.logged, st.seen, st.suppressed = now, now, 0
	return true, suppressed
}

type flushed struct {
	key        string
	suppressed int64
}

// sweep forgets the keys quiet for an interval and returns those that still
// had suppressed events to report.
func (sh *samplerShard) sweep(now time.Time, interval time.Duration) []flushed {
	var out []flushed
	for k, st := range sh.keys {
		if now.Sub(st.seen) < interval {
			continue
		}
		if st.suppressed > 0 {
			out = append(out, flushed{k, st.suppressed})
		}
		delete(sh.keys, k)
	}
	return out
}
