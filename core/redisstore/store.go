package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	tollgate "github.com/tollgate-go/tollgate/core"
)

// DefaultTimeout is how long a Take waits for Redis unless WithTimeout says
// otherwise. A rate limiter sits in front of every request, so it must give
// up long before the request would have.
const DefaultTimeout = 50 * time.Millisecond

// DefaultBreakerFailures and DefaultBreakerBackoff configure the circuit
// breaker unless WithCircuitBreaker says otherwise: it opens after 5 failed
// round trips in a row and stays open for 500ms before it lets a probe
// through.
const (
	DefaultBreakerFailures = 5
	DefaultBreakerBackoff  = 500 * time.Millisecond
)

// DefaultDenialCacheSize is how many denied buckets a Store remembers unless
// WithDenialCache says otherwise; about 150 bytes each.
const DefaultDenialCacheSize = 65536

// ErrUnavailable is wrapped by every error a Store returns because Redis did
// not answer in time, failed, or is cut off by the open circuit breaker. A
// Limiter applies its failure policy to such errors. Use errors.Is to test for
// it.
var ErrUnavailable = errors.New("redisstore: redis unavailable")

// ErrCircuitOpen is wrapped, together with ErrUnavailable, by the errors a
// Store returns without calling Redis because its circuit breaker is open.
var ErrCircuitOpen = errors.New("redisstore: circuit breaker open")

// maxBatch bounds the calls that one round trip carries, and maxQueued the
// calls that may wait for one; beyond that a Take fails at once rather than
// queue without bound behind a slow Redis.
const (
	maxBatch  = 2048
	maxQueued = 64 * maxBatch
)

// While a round trip is in flight, arriving calls wait for the next one. If
// secondTrip of them are waiting already, a second round trip takes them at
// once rather than wait for the first to come back: Redis then runs one
// batch while the Store reads the answers to the other, which about doubles
// the throughput under heavy load. A light load never gets there, and its
// calls share round trips. No more than maxInflight are in flight.
const (
	maxInflight = 2
	secondTrip  = 32
)

// An Option configures a Store.
type Option func(*config)

type config struct {
	prefix          string
	timeout         time.Duration
	breakerFailures int
	breakerBackoff  time.Duration
	cacheSize       int

	// Test hooks, set from export_test.go.
	localClock  func() time.Time // the clock of the denial cache
	scriptClock func() time.Time // if set, the script's time instead of TIME
}

// WithPrefix sets the prefix of every key the Store writes (default
// DefaultPrefix). It must not contain '{' or '}', which would move every
// tenant to the same Redis Cluster slot.
func WithPrefix(prefix string) Option {
	return func(c *config) { c.prefix = prefix }
}

// WithTimeout sets how long a Take waits for Redis before it gives up with an
// error wrapping ErrUnavailable (default DefaultTimeout; d must be > 0). The
// Store enforces it itself, whatever the client's timeouts; a shorter
// deadline on the caller's context also applies.
//
// go-redis ignores context deadlines unless the client's options set
// ContextTimeoutEnabled, so by default the Store makes each round trip from
// a goroutine of its own and stops waiting for it at the deadline. With
// ContextTimeoutEnabled set, a Take that finds the Store idle makes its
// round trip on the caller's goroutine, which saves a goroutine hop.
func WithTimeout(d time.Duration) Option {
	return func(c *config) { c.timeout = d }
}

// WithCircuitBreaker sets the circuit breaker: after failures round trips in
// a row fail or time out, the Store stops calling Redis for backoff and
// answers at once with an error wrapping ErrCircuitOpen; then one call goes
// through as a probe, and the breaker closes if it succeeds or stays open
// for another backoff if not. failures < 1 turns the breaker off. Defaults:
// DefaultBreakerFailures, DefaultBreakerBackoff.
func WithCircuitBreaker(failures int, backoff time.Duration) Option {
	return func(c *config) { c.breakerFailures, c.breakerBackoff = failures, backoff }
}

// WithDenialCache sets how many denied buckets the Store remembers locally
// (default DefaultDenialCacheSize; 0 turns the cache off). While Redis's
// answer says a bucket cannot serve a request before some instant, further
// requests that it could not serve either are denied without a round trip.
// The answer is exact: a bucket's state only moves forward, so a cached
// denial never denies a request that Redis would allow.
func WithDenialCache(size int) Option {
	return func(c *config) { c.cacheSize = size }
}

// A Store is a tollgate.Store that keeps its buckets in Redis, so that any
// number of API replicas share one bucket per key. It is safe for concurrent
// use; one Store per client and process is the intended use.
//
// Each Take runs tollgate.GCRA atomically in a Lua script, on the Redis
// server's clock. Takes that arrive while a round trip is in flight wait for
// the next one, which carries them all (under heavy load a second round trip
// may start before the first is back); a Take that finds the Store idle goes
// out at once. Requests for a bucket that Redis has already reported empty
// are denied locally until it refills (see WithDenialCache). Redis failures
// are bounded by a timeout and a circuit breaker (see WithTimeout and
// WithCircuitBreaker); the Limiter's failure policy, or its fallback store
// (see DividedStore), then decides.
//
// A Store needs no Close: the goroutines that make its round trips exit
// once it has been idle for a second. Closing the client is the caller's
// business. The zero Store is not usable; call New.
type Store struct {
	client      redis.UniversalClient
	mode        clientMode
	prefix      string
	timeout     time.Duration
	cache       *denialCache
	breaker     breaker
	base        time.Time // origin of now
	realBase    time.Time // origin of mono
	localClock  func() time.Time
	scriptClock func() time.Time

	timeoutErr error
	inline     bool // the client honours context deadlines: see lead

	handoff chan []*call // to a lingering runner

	mu       sync.Mutex
	inflight int     // round trips in flight (runners), at most maxInflight
	queue    []*call // calls waiting for the next round trip
}

var _ tollgate.Store = (*Store)(nil)

type clientMode int

const (
	modeOther   clientMode = iota // one key per script call
	modeSingle                    // one server: any keys in one script call
	modeCluster                   // Redis Cluster: one slot per script call
)

// New returns a Store that keeps its buckets in Redis through client: a
// *redis.Client (one server, or a Sentinel-managed failover client from
// redis.NewFailoverClient), a *redis.ClusterClient, or any UniversalClient.
// New does not contact Redis; it returns an error only for a bad option.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: New needs a Redis client, got nil")
	}
	cfg := config{
		prefix:          DefaultPrefix,
		timeout:         DefaultTimeout,
		breakerFailures: DefaultBreakerFailures,
		breakerBackoff:  DefaultBreakerBackoff,
		cacheSize:       DefaultDenialCacheSize,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if err := checkPrefix(cfg.prefix); err != nil {
		return nil, err
	}
	if cfg.timeout <= 0 {
		return nil, fmt.Errorf("redisstore: the timeout must be > 0, got %v", cfg.timeout)
	}
	if cfg.breakerFailures >= 1 && cfg.breakerBackoff <= 0 {
		return nil, fmt.Errorf("redisstore: the circuit breaker back-off must be > 0, got %v", cfg.breakerBackoff)
	}
	if cfg.cacheSize < 0 {
		return nil, fmt.Errorf("redisstore: the denial cache size must be >= 0, got %d", cfg.cacheSize)
	}
	s := &Store{
		client:      client,
		prefix:      cfg.prefix,
		timeout:     cfg.timeout,
		timeoutErr:  fmt.Errorf("%w: no answer within %v", ErrUnavailable, cfg.timeout),
		cache:       newDenialCache(cfg.cacheSize),
		localClock:  cfg.localClock,
		scriptClock: cfg.scriptClock,
		handoff:     make(chan []*call),
	}
	s.breaker.init(cfg.breakerFailures, micros(cfg.breakerBackoff), micros(cfg.timeout))
	s.realBase = time.Now()
	s.base = s.realBase
	if s.localClock != nil {
		s.base = s.localClock()
	}
	switch c := client.(type) {
	case *redis.Client:
		s.mode = modeSingle
		s.inline = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		s.mode = modeCluster
		s.inline = c.Options().ContextTimeoutEnabled
	default:
		s.mode = modeOther
	}
	return s, nil
}

func micros(d time.Duration) int64 { return int64(d / time.Microsecond) }

// now returns the local time in microseconds, on the monotonic clock unless
// a test set one. It times the denial cache only; decisions use the Redis
// server's clock.
func (s *Store) now() int64 {
	if s.localClock != nil {
		return s.localClock().Sub(s.base).Microseconds()
	}
	return int64(time.Since(s.base) / time.Microsecond)
}

// mono returns the time on the monotonic clock, which times deadlines and
// the breaker even in tests.
func (s *Store) mono() time.Duration { return time.Since(s.realBase) }

// call is one Take on its way to Redis.
type call struct {
	rkey      string
	limit     tollgate.Limit
	cost      int64
	tolerance int64         // Burst x token interval, µs
	need      int64         // cost x token interval, µs
	deadline  time.Duration // on mono: when the caller stops waiting

	// Written by whoever answers the call, before done is closed.
	rel int64 // how far the TAT was ahead of Redis's now, µs
	res tollgate.Result
	err error

	state atomic.Int32
	done  chan struct{} // closed when answered; nil for a call its caller sends itself (see lead)
}

const (
	callPending int32 = iota
	callDelivered
	callAbandoned
)

// deliver hands c's answer to its caller, unless the caller gave up.
func (c *call) deliver() {
	if c.state.CompareAndSwap(callPending, callDelivered) && c.done != nil {
		close(c.done)
	}
}

// Key returns the Redis key that holds the bucket of key, for looking at a
// tenant's bucket or resetting it (DEL) with redis-cli: the prefix, then a
// hash tag that is key itself when it is short printable ASCII without
// braces, and otherwise '#' and the base64url SHA-256 of key.
func (s *Store) Key(key string) string { return redisKey(s.prefix, key) }

// Take takes cost tokens from the bucket of key under limit. It implements
// tollgate.Store.
//
// An invalid limit or cost is reported (wrapping tollgate.ErrInvalidLimit or
// tollgate.ErrCostExceedsBurst) without calling Redis. When Redis cannot
// decide within the timeout, or before ctx is done, Take returns an error
// wrapping ErrUnavailable; it never waits longer than either allows.
func (s *Store) Take(ctx context.Context, key string, limit tollgate.Limit, cost int64) (tollgate.Result, error) {
	if err := limit.Validate(); err != nil {
		return tollgate.Result{}, err
	}
	if err := limit.CheckCost(cost); err != nil {
		return tollgate.Result{}, err
	}
	rkey := redisKey(s.prefix, key)
	mono := s.mono()
	start := micros(mono)
	if s.localClock != nil {
		start = s.now()
	}
	if r, ok := s.cache.deny(rkey, limit, cost, start); ok {
		return r, nil
	}
	if !s.breaker.allow(micros(mono)) {
		return tollgate.Result{}, errCircuitOpen
	}
	interval := limit.TokenInterval()
	c := &call{
		rkey:      rkey,
		limit:     limit,
		cost:      cost,
		tolerance: limit.Burst * interval,
		need:      cost * interval,
		deadline:  mono + s.timeout,
	}
	switch s.submit(c) {
	case queueFull:
		return tollgate.Result{}, errQueueFull
	case leading:
		s.lead(ctx, c)
	default:
		// The round trip that carries c answers it by its deadline, with
		// a timeout error if Redis has not answered: no timer per call.
		select {
		case <-c.done:
		case <-ctx.Done():
			if c.state.CompareAndSwap(callPending, callAbandoned) {
				return tollgate.Result{}, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
			}
			<-c.done
		}
	}
	if c.err != nil {
		return tollgate.Result{}, c.err
	}
	return c.res, nil
}

var (
	errCircuitOpen = fmt.Errorf("%w: %w", ErrUnavailable, ErrCircuitOpen)
	errQueueFull   = fmt.Errorf("%w: %d calls already wait for Redis", ErrUnavailable, maxQueued)
)

type submitted int

const (
	queued    submitted = iota // c waits for a round trip
	leading                    // the Store was idle: the caller makes c's round trip itself
	queueFull                  // too many calls wait already
)

// submit sends c at once if no round trip is in flight, and otherwise queues
// it for the next one.
func (s *Store) submit(c *call) submitted {
	if !s.inline {
		c.done = make(chan struct{})
	}
	s.mu.Lock()
	if s.inflight == 0 {
		s.inflight = 1
		s.mu.Unlock()
		if s.inline {
			return leading
		}
		s.dispatch([]*call{c})
		return queued
	}
	if c.done == nil {
		c.done = make(chan struct{})
	}
	if len(s.queue) >= maxQueued {
		s.mu.Unlock()
		return queueFull
	}
	s.queue = append(s.queue, c)
	var second []*call
	if s.inflight < maxInflight && len(s.queue) >= secondTrip {
		s.inflight++
		second = s.takeQueue()
	}
	s.mu.Unlock()
	if second != nil {
		s.dispatch(s.prepare(second))
	}
	return queued
}

// lead makes the round trip of c, sent while the Store was idle, on the
// caller's goroutine, which saves a hop to another goroutine and back. Only
// a client that honours context deadlines (ContextTimeoutEnabled) gets here,
// so c's deadline bounds the round trip. Calls that queued meanwhile go out
// next, from a goroutine of their own.
func (s *Store) lead(ctx context.Context, c *call) {
	rctx, cancel := context.WithDeadline(ctx, s.realBase.Add(c.deadline))
	batch := [1]*call{c}
	sent := s.now()
	out, err := s.exec(rctx, batch[:])
	cancel()
	switch {
	case err == nil:
		s.finish(batch[:], out, nil, sent)
	case ctx.Err() != nil:
		// The caller gave up: no fault of Redis.
		c.err = fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	case s.mono() >= c.deadline:
		s.breaker.failure(micros(s.mono()))
		c.err = s.timeoutErr
	default:
		s.finish(batch[:], out, err, sent)
	}
	if next := s.next(); next != nil {
		s.dispatch(next)
	}
}

// lingerFor is how long a runner with nothing left to send waits for more
// before it exits. Handing a batch to a waiting runner is cheaper than
// starting a goroutine, whose stack must grow again through go-redis, and a
// Store still holds no goroutine once it has been idle that long.
const lingerFor = time.Second

// dispatch hands batch to a lingering runner, or starts one. The caller has
// counted it in inflight.
func (s *Store) dispatch(batch []*call) {
	select {
	case s.handoff <- batch:
	default:
		go s.run(batch)
	}
}

// run makes round trips until no call waits, then lingers (see lingerFor).
// At most maxInflight goroutines run round trips at a time (counted by
// inflight), apart from round trips that overran the timeout and were left
// behind.
func (s *Store) run(batch []*call) {
	var linger *time.Timer
	for {
		if len(batch) > 0 && !s.roundTrip(batch) {
			return // the round trip overran; its watchdog carries on
		}
		if batch = s.next(); batch != nil {
			continue
		}
		if linger == nil {
			linger = time.NewTimer(lingerFor)
		} else {
			linger.Reset(lingerFor)
		}
		select {
		case batch = <-s.handoff:
			linger.Stop()
		case <-linger.C:
			return
		}
	}
}

// next takes the queued calls for the next round trip and prepares them. It
// returns nil, and retires the runner, when the queue is empty.
func (s *Store) next() []*call {
	s.mu.Lock()
	if len(s.queue) == 0 {
		s.inflight--
		s.mu.Unlock()
		return nil
	}
	batch := s.takeQueue()
	s.mu.Unlock()
	return s.prepare(batch)
}

// takeQueue takes up to maxBatch queued calls, oldest first. s.mu must be
// held.
func (s *Store) takeQueue() []*call {
	q := s.queue
	if len(q) > maxBatch {
		s.queue = append([]*call(nil), q[maxBatch:]...)
		return q[:maxBatch:maxBatch]
	}
	s.queue = nil
	return q
}

// prepare answers the calls of a batch that the denial cache now can, fails
// those that waited their whole timeout, drops those whose callers gave up,
// and returns the rest.
func (s *Store) prepare(batch []*call) []*call {
	now, mono := s.now(), s.mono()
	kept := batch[:0]
	for _, c := range batch {
		if c.state.Load() != callPending {
			continue
		}
		if r, ok := s.cache.deny(c.rkey, c.limit, c.cost, now); ok {
			c.res = r
			c.deliver()
			continue
		}
		if c.deadline <= mono {
			// It waited its whole timeout behind slow round trips.
			c.err = s.timeoutErr
			c.deliver()
			continue
		}
		kept = append(kept, c)
	}
	return kept
}

// roundTrip sends batch to Redis and delivers the answers. If Redis has not
// answered by the earliest deadline of the batch, a watchdog fails the
// batch, counts a failure and takes over the queue, and roundTrip reports
// false: the stuck request is left to the client's own timeouts while the
// next one goes out. Calls queue in arrival order, so no call waits past its
// deadline: the batch ahead of it ends by its own earlier deadline.
func (s *Store) roundTrip(batch []*call) bool {
	deadline := batch[0].deadline
	for _, c := range batch[1:] {
		deadline = min(deadline, c.deadline)
	}
	ctx, cancel := context.WithDeadline(context.Background(), s.realBase.Add(deadline))
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		s.breaker.failure(micros(s.mono()))
		for _, c := range batch {
			if c.state.Load() == callPending {
				c.err = s.timeoutErr
				c.deliver()
			}
		}
		s.run(nil)
	})
	sent := s.now()
	out, err := s.exec(ctx, batch)
	if !stop() {
		return false
	}
	s.finish(batch, out, err, sent)
	return true
}

// finish records the outcome of a round trip sent at local time sent, in the
// breaker and the denial cache, and answers its calls.
func (s *Store) finish(batch []*call, out []outcome, err error, sent int64) {
	if err != nil {
		s.breaker.failure(micros(s.mono()))
	} else {
		s.breaker.success()
	}
	for i, c := range batch {
		err := out[i].err
		if err == nil {
			err = c.decode(out[i].v)
		}
		if err != nil {
			c.err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		} else {
			s.cache.learn(c, sent)
		}
		c.deliver()
	}
}
