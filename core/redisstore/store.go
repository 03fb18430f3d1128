package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	tollgate "github.com/tollgate-go/tollgate/core"
)

// DefaultBreakerFailures and DefaultBreakerBackoff configure the circuit
// breaker unless WithCircuitBreaker says otherwise: it opens after 5 round
// trips in a row fail or miss their callers' deadlines, and stays open for
// 500ms before it lets a probe through.
const (
	DefaultBreakerFailures = 5
	DefaultBreakerBackoff  = 500 * time.Millisecond
)

// DefaultDenialCacheSize is how many tenants' denied buckets a Store
// remembers unless WithDenialCache says otherwise; about 200 bytes each.
const DefaultDenialCacheSize = 65536

// ErrUnavailable is wrapped by every error a Store returns because Redis did
// not answer in time, failed, or is cut off by the open circuit breaker. A
// Limiter applies its failure policy to such errors. Use errors.Is to test for
// it. Mistakes that waiting will not mend (credentials, permissions, a
// database that does not exist, a key of another type under the prefix) wrap
// tollgate.ErrMisconfigured instead.
var ErrUnavailable = errors.New("redisstore: redis unavailable")

// ErrCircuitOpen is wrapped, together with ErrUnavailable, by the errors a
// Store returns without calling Redis because its circuit breaker is open.
var ErrCircuitOpen = errors.New("redisstore: circuit breaker open")

// maxBatch bounds the calls that one round trip carries, and maxQueued the
// calls that may wait for one; beyond that a call fails at once rather than
// queue without bound behind a slow Redis.
const (
	maxBatch  = 2048
	maxQueued = 64 * maxBatch
)

// Calls that arrive while a round trip is in flight wait for the next one,
// which carries them all: that is what makes a loaded Store cheap. But a
// call never waits behind round trips that have been out for longer than
// twice the usual round trip (within [minSlow, maxSlow]): it goes out in a
// round trip of its own, on another connection, so a Redis that answers
// slowly but within the callers' deadlines is still a Redis that decides. If
// secondTrip calls are waiting already, a second round trip takes them at
// once: Redis then runs one batch while the Store reads the answers to the
// other. At most maxInflight round trips are in flight (the client's pool
// size, within [2, 64]).
const (
	minSlow    = time.Millisecond
	maxSlow    = 3 * time.Millisecond
	secondTrip = 32
)

// An rttAverage is a moving average of round trips that came back, in
// nanoseconds.
type rttAverage struct{ ns atomic.Int64 }

func (a *rttAverage) observe(d time.Duration) {
	old := a.ns.Load()
	a.ns.Store(old + (int64(d)-old)/8) // racy updates only blur the average
}

// slowAfter is how long a round trip may be out before the calls queued
// behind it go out on their own.
func (a *rttAverage) slowAfter() time.Duration {
	return min(max(2*time.Duration(a.ns.Load()), minSlow), maxSlow)
}

// An Option configures a Store.
type Option func(*config)

type config struct {
	prefix          string
	breakerFailures int
	breakerBackoff  time.Duration
	cacheSize       int
	logger          *slog.Logger
	loggerSet       bool

	// Test hooks, set from export_test.go.
	localClock  func() time.Time // the clock of the denial cache
	scriptClock func() time.Time // if set, the script's time instead of TIME
	wallClock   func() time.Time // if set, the time around which quota periods are looked up
}

// WithPrefix sets the prefix of every key the Store writes (default
// DefaultPrefix). It must not contain '{' or '}', which would move every
// tenant to the same Redis Cluster slot.
func WithPrefix(prefix string) Option {
	return func(c *config) { c.prefix = prefix }
}

// WithCircuitBreaker sets the circuit breaker: after failures round trips in
// a row fail or miss their callers' deadlines, the Store stops calling Redis
// for backoff and answers at once with an error wrapping ErrCircuitOpen;
// then one call goes through as a probe, and the breaker closes if it
// succeeds or stays open for another backoff if not. A Redis that answers
// slowly but in time never opens it, and neither do misconfiguration errors.
// failures < 1 turns the breaker off. Defaults: DefaultBreakerFailures,
// DefaultBreakerBackoff.
func WithCircuitBreaker(failures int, backoff time.Duration) Option {
	return func(c *config) { c.breakerFailures, c.breakerBackoff = failures, backoff }
}

// WithDenialCache sets how many tenants' denied buckets and quotas the Store
// remembers locally (default DefaultDenialCacheSize; 0 turns the cache off).
// While Redis's answer says a request cannot be served before some instant,
// further requests that could not be served either are denied without a
// round trip. A cached denial never denies a request that Redis would allow,
// and its RetryAfter is never earlier than Redis's: see docs/redis.md.
func WithDenialCache(size int) Option {
	return func(c *config) { c.cacheSize = size }
}

// WithLogger sets the logger of the Store's own findings (default
// slog.Default()): a key whose state was not valid and was repaired (once
// per key), a Redis that may evict buckets (from Check). WithLogger(nil)
// turns them off.
func WithLogger(logger *slog.Logger) Option {
	return func(c *config) { c.logger, c.loggerSet = logger, true }
}

// A Store is a tollgate.MultiStore that keeps its buckets and quotas in
// Redis, so that any number of API replicas share one bucket per key. It is
// safe for concurrent use; one Store per client and process is the intended
// use.
//
// Each Take or Do runs atomically in a Lua script, on the Redis server's
// clock. Calls that arrive while a round trip is in flight wait for the
// next one, which carries them all, unless that round trip is slow; a call
// that finds the Store idle goes out at once. Requests for buckets that
// Redis has already reported empty are denied locally until they refill (see
// WithDenialCache). Each call waits for Redis until its own deadline, then
// fails with an error wrapping ErrUnavailable while its round trip finishes
// on its connection; failures open a circuit breaker (see
// WithCircuitBreaker). The Limiter's failure policy, or its fallback store
// (see DividedStore), then decides.
//
// A Store needs no Close: the goroutines that make its round trips exit once
// it has been idle for a second, and the subscription that keeps its denial
// cache in step with resets once the cache is empty. Closing the client is
// the caller's business. The zero Store is not usable; call New.
type Store struct {
	client      redis.UniversalClient
	mode        clientMode
	prefix      string
	channel     string // resets and cancels are announced here
	epochKey    string
	cache       *denialCache
	breaker     breaker
	logger      *slog.Logger
	repairs     repairLog
	base        time.Time // origin of now
	realBase    time.Time // origin of mono
	localClock  func() time.Time
	scriptClock func() time.Time
	wallClock   func() time.Time
	maxInflight int

	epoch  epochState
	sub    subscription
	rtt    rttAverage
	bounds boundsCache

	mu            sync.Mutex
	inflight      int           // round trips in flight
	lastSent      time.Duration // on mono: when the latest round trip left
	queue         []*call       // calls waiting for the next round trip
	queueDeadline time.Time     // the earliest deadline in the queue
	idle          int           // runners waiting for work
	work          chan []*call  // to idle runners
	kick          *time.Timer   // sends the queue past slow round trips
	kickArmed     bool
	kickAt        time.Duration // on mono: when the kick is armed for
}

var (
	_ tollgate.MultiStore = (*Store)(nil)
	_ tollgate.Checker    = (*Store)(nil)
)

type clientMode int

const (
	modeOther   clientMode = iota // one Op per script call
	modeSingle                    // one server: any keys in one script call
	modeCluster                   // Redis Cluster: one slot per script call
)

// New returns a Store that keeps its buckets in Redis through client: a
// *redis.Client (one server, or a Sentinel-managed failover client from
// redis.NewFailoverClient), a *redis.ClusterClient, or any UniversalClient.
// New does not contact Redis; it returns an error only for a bad option.
// Call Check to verify the connection, credentials and permissions
// (tollgate.New does).
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: redisstore: New needs a Redis client, got nil", tollgate.ErrMisconfigured)
	}
	cfg := config{
		prefix:          DefaultPrefix,
		breakerFailures: DefaultBreakerFailures,
		breakerBackoff:  DefaultBreakerBackoff,
		cacheSize:       DefaultDenialCacheSize,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if !cfg.loggerSet {
		cfg.logger = slog.Default()
	}
	if err := checkPrefix(cfg.prefix); err != nil {
		return nil, err
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
		channel:     cfg.prefix + "#invalidate",
		epochKey:    cfg.prefix + "{#epoch}",
		cache:       newDenialCache(cfg.cacheSize),
		logger:      cfg.logger,
		localClock:  cfg.localClock,
		scriptClock: cfg.scriptClock,
		wallClock:   cfg.wallClock,
	}
	s.breaker.init(cfg.breakerFailures, micros(cfg.breakerBackoff), micros(2*tollgate.DefaultStoreTimeout))
	s.realBase = time.Now()
	s.base = s.realBase
	if s.localClock != nil {
		s.base = s.localClock()
	}
	pool := 10 * runtime.GOMAXPROCS(0)
	switch c := client.(type) {
	case *redis.Client:
		s.mode = modeSingle
		pool = c.Options().PoolSize
	case *redis.ClusterClient:
		s.mode = modeCluster
		pool = c.Options().PoolSize
	default:
		s.mode = modeOther
	}
	s.maxInflight = min(max(pool, 2), 64)
	s.work = make(chan []*call, s.maxInflight)
	s.kick = time.AfterFunc(time.Hour, s.kickQueue)
	s.kick.Stop()
	s.sub.init(s)
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

// wallNow returns the time around which quota periods are looked up.
func (s *Store) wallNow() time.Time {
	if s.scriptClock != nil {
		return s.scriptClock()
	}
	if s.wallClock != nil {
		return s.wallClock()
	}
	return time.Now()
}

// mono returns the time on the monotonic clock, which times round trips and
// the breaker even in tests.
func (s *Store) mono() time.Duration { return time.Since(s.realBase) }

// clocks returns, from one reading of the clock (which costs more than the
// rest of a decision's bookkeeping on some virtual machines), the wall time,
// the denial cache's time (see now) and the monotonic time (see mono).
func (s *Store) clocks() (wall time.Time, local int64, mono time.Duration) {
	wall = time.Now()
	mono = wall.Sub(s.realBase)
	if s.localClock != nil {
		return wall, s.now(), mono
	}
	return wall, int64(wall.Sub(s.base) / time.Microsecond), mono
}

// Key returns the Redis key that holds the main bucket of key, for looking
// at a tenant's bucket with redis-cli: the prefix, then a hash tag that is
// key itself when it is short printable ASCII without braces, and otherwise
// '#' and the base64url SHA-256 of key. The tenant's other rules are kept
// under this key, ':' and the rule's Sub (and a quota's period start). Reset
// a tenant with Do and OpReset rather than DEL: replicas' denial caches then
// learn of it.
func (s *Store) Key(key string) string { return redisKey(s.prefix, key) }

// Take takes cost tokens from the bucket of key under limit. It implements
// tollgate.Store, and makes the same decision as Do with an OpTake of the
// one Rule{Limit: limit}.
//
// An invalid limit or cost is reported (wrapping tollgate.ErrInvalidLimit or
// tollgate.ErrCostExceedsBurst) without calling Redis. Take waits for Redis
// until ctx's deadline, or for tollgate.DefaultStoreTimeout if ctx has none,
// and then returns an error wrapping ErrUnavailable.
func (s *Store) Take(ctx context.Context, key string, limit tollgate.Limit, cost int64) (tollgate.Result, error) {
	if err := limit.Validate(); err != nil {
		return tollgate.Result{}, err
	}
	if err := limit.CheckCost(cost); err != nil {
		return tollgate.Result{}, err
	}
	tenant := redisKey(s.prefix, key)
	if s.sub.confirmed.Load() {
		// A tenant over its limit costs no allocation beyond its key.
		if r, ok := s.cache.answerBucket(tenant, limit, cost, s.now()); ok {
			return r, nil
		}
	}
	tc := takeCalls.Get().(*takeCall)
	c := &tc.call
	c.reset()
	tc.rule[0] = tollgate.Rule{Limit: limit}
	c.own = tollgate.Op{Kind: tollgate.OpTake, Key: key, Rules: tc.rule[:], Cost: cost, Results: tc.result[:0], Marks: tc.mark[:0]}
	c.op = &c.own
	c.tenant = tenant
	tc.key[0] = tenant
	c.keys = tc.key[:]
	err := s.do(ctx, c, time.Time{})
	var r tollgate.Result
	if err == nil {
		r = c.own.Results[0]
	}
	if c.reusable() {
		c.own, c.tenant, tc.key[0] = tollgate.Op{}, "", ""
		takeCalls.Put(tc)
	}
	return r, err
}

// Do runs op on the rules of op.Key in one atomic script call (one per Op,
// batched with other calls' into shared round trips). It implements
// tollgate.MultiStore; op.go in package tollgate documents each OpKind.
//
// Do trusts its Op: every rule must be valid for op.Cost (Rule.Validate),
// as the Limiter ensures once per plan. A MaxDelay beyond tollgate.MaxWindow
// counts as tollgate.MaxWindow. Do waits for Redis until op.Deadline, or
// ctx's deadline if op.Deadline is zero, or for tollgate.DefaultStoreTimeout
// if neither is set, and returns when ctx is done; it then returns an error
// wrapping ErrUnavailable.
//
// All of a tenant's rules share its hash tag, so an Op works on Redis
// Cluster. A quota's periods are decided on Redis's clock. OpReset and a
// OpCancel that gives tokens back are announced to every Store with the same
// prefix, whose denial caches forget the tenant.
func (s *Store) Do(ctx context.Context, op *tollgate.Op) error {
	// The call works on a copy of op: its round trip may read the Op
	// after a caller that gave up has returned, and that caller may be
	// using its Op again (the Limiter recycles them). The answer goes
	// back into op here, in the caller's goroutine.
	dc := doCalls.Get().(*doCall)
	c := &dc.call
	c.reset()
	c.tenant = redisKey(s.prefix, op.Key)
	c.own = *op
	c.own.Rules = append(dc.rules[:0], op.Rules...)
	c.own.Results = dc.results[:0]
	c.own.Marks = append(dc.marks[:0], op.Marks...)
	c.op = &c.own
	c.keys = dc.keys[:0]
	if c.args == nil {
		c.args = dc.args[:0]
	}
	c.prepareKeys(s.wallNow(), &s.bounds)
	start := s.mono()
	err := s.do(ctx, c, op.Deadline)
	// For the Limiter's observers: the wait for Redis, or for its
	// failure (nearly 0 for an answer from the denial cache).
	op.Latency = s.mono() - start
	if err == nil {
		op.Allowed, op.Delay = c.own.Allowed, c.own.Delay
		op.Results = append(op.Results[:0], c.own.Results...)
		op.Marks = append(op.Marks[:0], c.own.Marks...)
	}
	if c.reusable() {
		c.own, c.tenant = tollgate.Op{}, ""
		clear(dc.rules[:])
		clear(dc.keys[:])
		dc.call.keys = nil
		doCalls.Put(dc)
	}
	return err
}

var (
	errCircuitOpen = fmt.Errorf("%w: %w", ErrUnavailable, ErrCircuitOpen)
	errQueueFull   = fmt.Errorf("%w: %d calls already wait for Redis", ErrUnavailable, maxQueued)
)

// do answers c from the denial cache, or sends it to Redis and waits for
// the answer until its deadline.
func (s *Store) do(ctx context.Context, c *call, deadline time.Time) error {
	kind := c.op.Kind
	wall, local, mono := s.clocks()
	if kind == tollgate.OpTake || kind == tollgate.OpInspect {
		if s.cached(c, local) {
			return nil
		}
	} else {
		// This replica learns of its own resets and cancels at once; the
		// others through the announcement.
		s.cache.forget(c.tenant)
	}
	if !s.breaker.allow(micros(mono)) {
		return errCircuitOpen
	}
	if deadline.IsZero() {
		if d, ok := ctx.Deadline(); ok {
			deadline = d
		} else {
			deadline = wall.Add(tollgate.DefaultStoreTimeout)
		}
	}
	if !wall.Before(deadline) {
		return fmt.Errorf("%w: the deadline had passed before the call was sent", ErrUnavailable)
	}
	c.deadline = deadline
	c.encode()
	if !s.submit(c, mono) {
		return errQueueFull
	}
	// The Store answers c by its deadline (see trip and kickQueue), so the
	// caller needs no timer of its own; ctx may end it sooner.
	done := ctx.Done()
	if done == nil {
		<-c.done
		return c.err
	}
	select {
	case <-c.done:
	case <-done:
		if err := s.giveUp(c, errors.Is(ctx.Err(), context.DeadlineExceeded)); err != nil {
			return fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
		}
	}
	return c.err
}

// cached answers c from the denial cache if it can. The cache answers
// nothing while no subscription tells it of resets (see subscription).
func (s *Store) cached(c *call, now int64) bool {
	return s.sub.confirmed.Load() && s.cache.answer(c, now)
}

// giveUp abandons c when its caller stops waiting. A caller whose deadline
// passed while its round trip was out counts that round trip as failed
// (once); one that was merely cancelled does not. It returns nil if c was
// answered meanwhile.
func (s *Store) giveUp(c *call, deadline bool) error {
	if !c.state.CompareAndSwap(callPending, callAbandoned) {
		<-c.done
		return nil
	}
	if tr := c.trip.Load(); deadline && tr != nil && tr.state.CompareAndSwap(tripInFlight, tripLate) {
		s.breaker.failure(micros(s.mono()), tr.sent)
	}
	return errAbandoned
}

var errAbandoned = errors.New("abandoned")

// submit queues c and starts a round trip if none is in flight, if those in
// flight are slow, or if enough calls wait. It reports false if too many
// calls wait already.
func (s *Store) submit(c *call, mono time.Duration) bool {
	s.mu.Lock()
	if len(s.queue) >= maxQueued {
		s.mu.Unlock()
		return false
	}
	s.queue = append(s.queue, c)
	if s.queueDeadline.IsZero() || c.deadline.Before(s.queueDeadline) {
		s.queueDeadline = c.deadline
	}
	if s.inflight == 0 ||
		s.inflight < s.maxInflight && mono-s.lastSent >= s.rtt.slowAfter() ||
		s.inflight < 2 && len(s.queue) >= secondTrip {
		s.startLocked(mono) // unlocks
		return true
	}
	s.armKickLocked(mono)
	s.mu.Unlock()
	return true
}

// armKickLocked arms the kick timer for the earlier of the moment the round
// trips in flight count as slow and the earliest deadline in the queue.
// s.mu must be held.
func (s *Store) armKickLocked(mono time.Duration) {
	var wait time.Duration = -1
	if s.inflight < s.maxInflight {
		wait = max(s.lastSent+s.rtt.slowAfter()-mono, 0)
	}
	if !s.queueDeadline.IsZero() {
		if d := max(time.Until(s.queueDeadline), 0); wait < 0 || d < wait {
			wait = d
		}
	}
	if wait < 0 {
		return // a round trip coming back takes the queue
	}
	at := mono + wait
	if s.kickArmed && s.kickAt <= at {
		return
	}
	s.kickArmed, s.kickAt = true, at
	s.kick.Reset(wait)
}

// kickQueue answers the queued calls whose deadlines have passed, and sends
// the queue past round trips that have been out too long.
func (s *Store) kickQueue() {
	s.mu.Lock()
	s.kickArmed = false
	if len(s.queue) == 0 {
		s.mu.Unlock()
		return
	}
	if now := time.Now(); !now.Before(s.queueDeadline) {
		// Calls that waited their whole deadline in the queue (every
		// connection busy with slow round trips): answer them now.
		var next time.Time
		kept := s.queue[:0]
		for _, c := range s.queue {
			if c.state.Load() != callPending {
				continue
			}
			if !now.Before(c.deadline) {
				c.fail(timeoutErr(c))
				continue
			}
			if next.IsZero() || c.deadline.Before(next) {
				next = c.deadline
			}
			kept = append(kept, c)
		}
		clear(s.queue[len(kept):])
		s.queue, s.queueDeadline = kept, next
		if len(s.queue) == 0 {
			s.queue = nil
			s.mu.Unlock()
			return
		}
	}
	mono := s.mono()
	if s.inflight < s.maxInflight && mono-s.lastSent >= s.rtt.slowAfter() {
		s.startLocked(mono)
		return
	}
	s.armKickLocked(mono)
	s.mu.Unlock()
}

// startLocked takes the queue into a new round trip, on an idle runner or a
// new one. s.mu must be held; startLocked releases it.
func (s *Store) startLocked(mono time.Duration) {
	batch := s.takeQueue()
	s.inflight++
	s.lastSent = mono
	if s.idle > 0 {
		s.idle--
		s.mu.Unlock()
		s.work <- batch // never blocks: a runner is waiting for it
		return
	}
	s.mu.Unlock()
	go s.run(batch)
}

// lingerFor is how long a runner with nothing left to send waits for more
// before it exits. Handing a batch to a waiting runner is cheaper than
// starting a goroutine, whose stack must grow again through go-redis, and a
// Store still holds no goroutine once it has been idle that long.
const lingerFor = time.Second

// run makes round trips until no call waits, then lingers (see lingerFor).
func (s *Store) run(batch []*call) {
	r := &runner{}
	// The linger timer is armed once and re-armed only when it fires
	// early: a busy runner touches no timer between round trips.
	linger := time.NewTimer(lingerFor)
	defer linger.Stop()
	var lastActive time.Duration
	for {
		s.roundTrip(batch, r)
		if batch = s.next(); batch != nil {
			continue
		}
		lastActive = s.mono()
		s.mu.Lock()
		s.idle++
		s.mu.Unlock()
	wait:
		select {
		case batch = <-s.work:
		case <-linger.C:
			if idle := s.mono() - lastActive; idle < lingerFor {
				linger.Reset(lingerFor - idle)
				goto wait
			}
			s.mu.Lock()
			if s.idle > 0 {
				s.idle--
				s.mu.Unlock()
				return
			}
			// A batch is on its way to an idle runner: this one.
			s.mu.Unlock()
			batch = <-s.work
			linger.Reset(lingerFor)
		}
	}
}

// A runner is what a goroutine that makes round trips keeps between them:
// the timer of its trips' watchdog, armed for each trip.
type runner struct {
	timer   *time.Timer
	trip    atomic.Pointer[trip]
	scratch scratch
}

func (r *runner) fire() {
	if tr := r.trip.Load(); tr != nil {
		tr.fire()
	}
}

// next takes the queued calls for the next round trip. It returns nil, and
// counts the round trip as ended, when the queue is empty.
func (s *Store) next() []*call {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		s.inflight--
		return nil
	}
	s.lastSent = s.mono()
	return s.takeQueue()
}

// takeQueue takes up to maxBatch queued calls, oldest first. s.mu must be
// held.
func (s *Store) takeQueue() []*call {
	q := s.queue
	if len(q) > maxBatch {
		s.queue = append([]*call(nil), q[maxBatch:]...)
		s.queueDeadline = time.Time{}
		for _, c := range s.queue {
			if s.queueDeadline.IsZero() || c.deadline.Before(s.queueDeadline) {
				s.queueDeadline = c.deadline
			}
		}
		return q[:maxBatch:maxBatch]
	}
	s.queue, s.queueDeadline = nil, time.Time{}
	return q
}

// prepare answers the calls of a batch that the denial cache now can, fails
// those whose deadlines have passed, drops those whose callers gave up, and
// returns the rest.
func (s *Store) prepare(batch []*call, wall time.Time, now int64) []*call {
	kept := batch[:0]
	for _, c := range batch {
		if c.state.Load() != callPending {
			continue
		}
		if !wall.Before(c.deadline) {
			c.fail(timeoutErr(c))
			continue
		}
		if k := c.kind; (k == tollgate.OpTake || k == tollgate.OpInspect) && s.sub.confirmed.Load() && c.claim() {
			if s.cache.answer(c, now) {
				c.release()
				continue
			}
			c.state.Store(callPending)
		}
		kept = append(kept, c)
	}
	return kept
}

// roundTrip sends batch to Redis and delivers the answers. The round trip
// runs on a context that never expires, so it always finishes on its
// connection, whatever its callers do meanwhile: its watchdog answers each
// call at its deadline (see trip), and the round trip's answers then go to
// the calls still waiting.
func (s *Store) roundTrip(batch []*call, r *runner) {
	wall, sent, sentMono := s.clocks()
	batch = s.prepare(batch, wall, sent)
	if len(batch) == 0 {
		return
	}
	epoch := s.epoch.check(s)
	tr := &trip{sent: micros(sentMono), s: s, calls: batch}
	for _, c := range batch {
		c.trip.Store(tr)
	}
	tr.watch(wall, r)
	groups, err := s.exec(context.Background(), batch, epoch, &r.scratch)
	r.trip.Store(nil)
	tr.end()
	_, recv, recvMono := s.clocks()
	if tr.state.CompareAndSwap(tripInFlight, tripBack) {
		switch {
		case err == nil:
			s.breaker.success()
			s.rtt.observe(recvMono - sentMono)
		case !isMisconfig(err):
			s.breaker.failure(micros(recvMono), tr.sent)
		}
	}
	if epoch != nil {
		s.epoch.learn(s, epoch, micros(sentMono))
	}
	for i := range groups {
		g := &groups[i]
		s.deliver(g, batch, sent, recv)
	}
}

// deliver answers the calls of group g from its reply; sent and recv are
// the local times (see now) at which the round trip left and came back.
func (s *Store) deliver(g *group, batch []*call, sent, recv int64) {
	now, vals, gerr := reply(g, batch)
	for _, j := range g.idx {
		c := batch[j]
		var v []int64
		if gerr == nil {
			v, vals = vals[:1+c.rules:1+c.rules], vals[1+c.rules:]
		}
		if !c.claim() {
			continue // answered by the watchdog, or abandoned
		}
		if gerr != nil {
			c.err = classify(gerr)
			c.release()
			continue
		}
		if err := c.decode(now, v); err != nil {
			c.err = err
		} else if kind := c.op.Kind; kind == tollgate.OpTake || kind == tollgate.OpInspect {
			s.cache.learn(s, c, now, v, sent, recv)
		}
		if v[0] > 3 {
			s.repairs.report(s, c, v[0]>>2)
		}
		c.release()
	}
}

// classify wraps an error from Redis: misconfiguration (credentials,
// permissions, a database that does not exist) as tollgate.ErrMisconfigured,
// anything else as ErrUnavailable.
func classify(err error) error {
	if isMisconfig(err) {
		return fmt.Errorf("%w: %w", tollgate.ErrMisconfigured, err)
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}
