// Package memory is an in-process tollgate.Store for services that run as a
// single instance: GCRA buckets held in a sharded hash table whose lookups
// and updates take no lock.
//
// Each bucket is one word, its theoretical arrival time, updated with a
// compare-and-swap. Buckets that are full again are dropped in the background,
// which changes no decision, and a hard cap on tracked keys bounds memory
// against floods of made-up tenant IDs.
package memory

import (
	"context"
	"hash/maphash"
	"runtime"
	"sync"
	"sync/atomic"
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

// An Option configures a Store.
type Option func(*config)

type config struct {
	clock         func() time.Time
	maxKeys       int
	sweepInterval time.Duration
}

// WithClock makes the Store read its time from now instead of the monotonic
// clock. It is meant for tests, with a clock that only moves when told.
func WithClock(now func() time.Time) Option {
	return func(c *config) { c.clock = now }
}

// WithMaxKeys caps the number of buckets the Store tracks (n >= 1). When a
// new key arrives at the cap, buckets that are full again go first; if none
// are, the buckets closest to full (those whose requests are oldest) are
// evicted and counted in Stats().Evictions. An evicted key starts again from a
// full bucket.
func WithMaxKeys(n int) Option {
	return func(c *config) {
		if n >= 1 {
			c.maxKeys = n
		}
	}
}

// WithSweepInterval sets how often a background goroutine drops the buckets
// that are full again; d <= 0 turns the goroutine off, leaving sweeps to
// happen only as tables grow.
func WithSweepInterval(d time.Duration) Option {
	return func(c *config) { c.sweepInterval = d }
}

// A Store is an in-process tollgate.Store. It is safe for concurrent use.
// Take neither allocates nor locks for a key it already tracks.
//
// A Store made by New runs a background sweeper; Close stops it, and it also
// stops once the Store is no longer referenced.
type Store struct {
	b       *buckets
	stopper *stopper
}

var _ tollgate.Store = (*Store)(nil)

// Stats are counters of a Store.
type Stats struct {
	Keys      int    // buckets tracked now
	Evictions uint64 // buckets dropped before they were full, to honour the key cap
}

// New returns a Store configured by opts.
func New(opts ...Option) *Store {
	cfg := config{maxKeys: DefaultMaxKeys, sweepInterval: DefaultSweepInterval}
	for _, o := range opts {
		o(&cfg)
	}
	b := newBuckets(cfg)
	s := &Store{b: b, stopper: &stopper{stop: make(chan struct{})}}
	if cfg.sweepInterval > 0 {
		go b.sweepEvery(cfg.sweepInterval, s.stopper.stop)
		runtime.AddCleanup(s, func(st *stopper) { st.close() }, s.stopper)
	}
	return s
}

// Take takes cost tokens from the bucket of key under limit. It implements
// tollgate.Store; ctx is not used, as Take never waits.
func (s *Store) Take(_ context.Context, key string, limit tollgate.Limit, cost int64) (tollgate.Result, error) {
	if err := limit.Validate(); err != nil {
		return tollgate.Result{}, err
	}
	if err := limit.CheckCost(cost); err != nil {
		return tollgate.Result{}, err
	}
	return s.b.takeAt(key, limit, cost, s.b.now()), nil
}

// TakeAt is Take at the time now, which must carry a monotonic clock
// reading, as time.Now's does; it saves the Store a clock read. A Store made
// WithClock ignores now and reads its own clock. It implements
// tollgate.TimedStore.
func (s *Store) TakeAt(_ context.Context, key string, limit tollgate.Limit, cost int64, now time.Time) (tollgate.Result, error) {
	if err := limit.Validate(); err != nil {
		return tollgate.Result{}, err
	}
	if err := limit.CheckCost(cost); err != nil {
		return tollgate.Result{}, err
	}
	var us int64
	if s.b.clock != nil {
		us = s.b.now()
	} else {
		us = now.Sub(s.b.base).Microseconds()
	}
	return s.b.takeAt(key, limit, cost, us), nil
}

// NonBlocking marks the Store as one whose Take never waits on I/O.
func (*Store) NonBlocking() {}

// Sweep drops every bucket that is full again now and returns how many it
// dropped. The background sweeper calls it; calling it changes no decision.
func (s *Store) Sweep() int {
	return s.b.sweep()
}

// Stats returns the Store's counters.
func (s *Store) Stats() Stats {
	return Stats{Keys: s.b.len(), Evictions: s.b.evictions.Load()}
}

// Close stops the background sweeper. The Store keeps working.
func (s *Store) Close() error {
	s.stopper.close()
	return nil
}

type stopper struct {
	once sync.Once
	stop chan struct{}
}

func (s *stopper) close() { s.once.Do(func() { close(s.stop) }) }

// buckets is everything the sweeper needs, kept apart from Store so that a
// running sweeper does not keep an unreachable Store alive.
type buckets struct {
	shards    []shard
	shardMask uint64
	shardCap  int
	seed      maphash.Seed
	base      time.Time
	clock     func() time.Time
	evictions atomic.Uint64
}

const maxShards = 256

func newBuckets(cfg config) *buckets {
	// Enough shards that the insert path rarely waits, but no shard so
	// small that uneven hashing wastes much of the key cap.
	n := 1
	for n < maxShards && n*2*64 <= cfg.maxKeys {
		n *= 2
	}
	b := &buckets{
		shards:    make([]shard, n),
		shardMask: uint64(n - 1),
		shardCap:  (cfg.maxKeys + n - 1) / n,
		seed:      maphash.MakeSeed(),
		clock:     cfg.clock,
	}
	if b.clock != nil {
		b.base = b.clock()
	} else {
		b.base = time.Now()
	}
	for i := range b.shards {
		b.shards[i].table.Store(newTable(minSlots))
	}
	return b
}

// now returns the store's time in microseconds, from the monotonic clock.
func (b *buckets) now() int64 {
	if b.clock != nil {
		return b.clock().Sub(b.base).Microseconds()
	}
	return int64(time.Since(b.base) / time.Microsecond)
}

func (b *buckets) takeAt(key string, limit tollgate.Limit, cost int64, now int64) tollgate.Result {
	k := b.makeKey(key)
	sh := &b.shards[k.hash&b.shardMask]
	if sl := sh.table.Load().find(k); sl != nil {
		if r, ok := takeFrom(sl, now, limit, cost); ok {
			return r
		}
	}
	return sh.takeLocked(b, k, now, limit, cost)
}

// takeFrom applies one GCRA decision to a tracked bucket. It reports false
// when the bucket was dropped or moved meanwhile, and the caller must look
// again under the shard's lock.
func takeFrom(sl *slot, now int64, limit tollgate.Limit, cost int64) (tollgate.Result, bool) {
	for {
		tat := sl.tat.Load()
		if tat <= lastMarker {
			return tollgate.Result{}, false
		}
		newTAT, r := tollgate.GCRA(tat, now, limit, cost)
		if !r.Allowed || sl.tat.CompareAndSwap(tat, newTAT) {
			return r, true
		}
	}
}

func (b *buckets) sweep() int {
	now := b.now()
	dropped := 0
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.Lock()
		dropped += sh.dropFull(now)
		if sh.used > 2*sh.live+minSlots {
			sh.rebuild(b.seed, now)
		}
		sh.mu.Unlock()
	}
	return dropped
}

func (b *buckets) sweepEvery(d time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			b.sweep()
		}
	}
}

func (b *buckets) len() int {
	n := 0
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.Lock()
		n += sh.live
		sh.mu.Unlock()
	}
	return n
}
