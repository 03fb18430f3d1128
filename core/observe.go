package tollgate

import (
	"context"
	"errors"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// An Observer is told of every decision a Limiter makes, in the request's
// goroutine, after the decision and before the Limiter returns it. Observe
// must be quick and safe for concurrent use, and must not keep d: copy what
// it counts. The Limiter's log of throttled requests (see WithLogger) is
// the first Observer of every Limiter; metrics and the insights tracker are
// others. A decision's Tenant is for trackers that need it, never for
// metric labels: its cardinality is the number of tenants.
type Observer interface {
	Observe(ctx context.Context, d *Decision)
}

// A decisionLog is the Observer that logs throttled and delayed requests,
// each sampled per tenant.
type decisionLog struct {
	logger    *slog.Logger
	throttled *sampler
	delayed   *sampler
	failures  *sampler // failures and mistakes, per kind
}

// logInterval is how often a tenant's throttled requests may be logged.
const logInterval = time.Second

func newDecisionLog(logger *slog.Logger) *decisionLog {
	quiet := func(msg string, level slog.Level) func(string, int64) {
		return func(tenant string, suppressed int64) {
			logger.LogAttrs(context.Background(), level, msg,
				slog.String("tenant_id", tenant), slog.Int64("suppressed", suppressed))
		}
	}
	return &decisionLog{
		logger:    logger,
		throttled: newSampler(logInterval, quiet("throttled requests not logged", slog.LevelWarn)),
		delayed:   newSampler(logInterval, quiet("delayed requests not logged", slog.LevelInfo)),
		failures:  newSampler(logInterval, nil),
	}
}

// Observe logs d if it was throttled, delayed or refused for a mistake in
// the configuration, and reports tenants whose throttling has stopped.
func (g *decisionLog) Observe(ctx context.Context, d *Decision) {
	switch d.outcome {
	case outcomeDenied, outcomeShadowDenied:
		g.throttle(ctx, d)
	case outcomeDelayed:
		g.delay(ctx, d)
	default:
		if d.mistake != nil {
			g.misconfigured(ctx, d)
		}
		g.delayed.flushQuiet(d.Time)
		g.throttled.flushQuiet(d.Time)
	}
}

func (g *decisionLog) throttle(ctx context.Context, d *Decision) {
	log, suppressed := g.throttled.admit(d.Tenant, d.Time)
	if !log {
		return
	}
	msg := "request throttled"
	if d.Shadow {
		// Shadow mode let it through: the line says what enforcing
		// would have done.
		msg = "request would be throttled (shadow mode)"
	}
	limit, rate := policyFigures(d)
	g.logger.LogAttrs(ctx, slog.LevelWarn, msg,
		slog.String("tenant_id", d.Tenant),
		slog.String("plan", d.Plan),
		slog.String("policy", d.Policy),
		slog.Int64("limit", limit),
		rate,
		slog.Int64("cost", d.Cost),
		slog.String("budget", d.Budget),
		slog.Int64("remaining", d.Remaining),
		slog.Int64("retry_after_ms", d.RetryAfter.Milliseconds()),
		slog.String("method", d.Method),
		slog.String("route", d.Route),
		slog.Int64("suppressed", suppressed),
	)
}

// delay logs a request granted after a wait, at level Info: a delay is the
// limiter pacing a client as designed, not a refusal.
func (g *decisionLog) delay(ctx context.Context, d *Decision) {
	log, suppressed := g.delayed.admit(d.Tenant, d.Time)
	if !log {
		return
	}
	limit, rate := policyFigures(d)
	g.logger.LogAttrs(ctx, slog.LevelInfo, "request delayed",
		slog.String("tenant_id", d.Tenant),
		slog.String("plan", d.Plan),
		slog.String("policy", d.Policy),
		slog.Int64("limit", limit),
		rate,
		slog.Int64("cost", d.Cost),
		slog.String("budget", d.Budget),
		slog.Int64("remaining", d.Remaining),
		slog.Int64("delay_ms", d.Delay.Milliseconds()),
		slog.String("method", d.Method),
		slog.String("route", d.Route),
		slog.Int64("suppressed", suppressed),
	)
}

// policyFigures returns the size of the policy d.Policy names (a burst or a
// quota's tokens) and its rate: tokens a second, or a quota's period.
func policyFigures(d *Decision) (int64, slog.Attr) {
	if d.rules == nil {
		return 0, slog.String("rate", "")
	}
	p := &d.rules.policies[d.policyIndex]
	if !p.Quota.IsZero() {
		return p.Quota.Tokens, slog.String("rate", p.Quota.Period.String())
	}
	return p.Limit.Burst, slog.Float64("rate", p.Limit.Rate)
}

// logFailure logs a store's or a resolver's failure, at most once a second
// per kind.
func (l *Limiter) logFailure(ctx context.Context, d *Decision, err error) {
	if l.log == nil {
		return
	}
	key, msg := "store", "rate limiter store failed"
	switch {
	case d.failure == "resolver":
		key, msg = "resolver", "plan resolver failed"
	case errors.Is(err, ErrMisconfigured):
		key, msg = "store-misconfigured", "rate limiter store misconfigured"
	}
	log, suppressed := l.log.failures.admit(key, d.Time)
	if !log {
		return
	}
	policy := "fail-open"
	if l.failClosed {
		policy = "fail-closed"
	}
	l.logger.LogAttrs(ctx, slog.LevelError, msg,
		slog.String("policy", policy),
		slog.Bool("fallback", l.fallback != nil && d.failure != "resolver"),
		slog.String("error", err.Error()),
		slog.Int64("suppressed", suppressed),
	)
}

// refuse notes mistake, in the application's configuration or plans, as
// what refuses d's request, and returns it. The log writes it when told of
// d, by which time an HTTP adapter has named the route (see
// hooks.RouteAlways).
func (d *Decision) refuse(mistake error) error {
	d.mistake = mistake
	return mistake
}

// misconfigured logs the mistake that refused d, at most once a second.
func (g *decisionLog) misconfigured(ctx context.Context, d *Decision) {
	log, suppressed := g.failures.admit("misconfiguration", d.Time)
	if !log {
		return
	}
	g.logger.LogAttrs(ctx, slog.LevelError, "rate limiter misconfigured: request refused",
		slog.String("tenant_id", d.Tenant),
		slog.String("plan", d.Plan),
		slog.Int64("cost", d.Cost),
		slog.String("budget", d.Budget),
		slog.String("method", d.Method),
		slog.String("route", d.Route),
		slog.String("error", d.mistake.Error()),
		slog.Int64("suppressed", suppressed),
	)
}

// mistake logs a configuration mistake that does not refuse requests, once
// per key for the Limiter's life.
func (l *Limiter) mistake(ctx context.Context, key, msg string, attrs ...slog.Attr) {
	if l.log == nil {
		return
	}
	if _, seen := l.mistakes.LoadOrStore(key, true); !seen {
		l.logger.LogAttrs(ctx, slog.LevelWarn, msg, attrs...)
	}
}

// A sampler admits at most one event per key per interval and counts the
// rest. Counts left over when a key goes quiet are handed to flush by the
// first call of admit or flushQuiet an interval later, on any key. It tracks
// a bounded number of keys: past the bound it forgets a shard's keys, which
// at worst logs one extra line per key.
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
