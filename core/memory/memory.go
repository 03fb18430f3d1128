package memory

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// A Store is an in-process tollgate.Store. It is safe for concurrent use.
// Take neither allocates nor locks for a key it already tracks.
//
// A Store made by New runs a background sweeper; Close stops it, and it also
// stops once the Store is no longer referenced. The zero Store is not usable:
// its Check and Take return an error.
type Store struct {
	b       *buckets // nil when the Store is misconfigured or zero
	err     error    // why b is nil, for a Store made by New
	stopper *stopper
}

var (
	_ tollgate.Store   = (*Store)(nil)
	_ tollgate.Checker = (*Store)(nil)
)

// Stats are counters of a Store.
type Stats struct {
	Keys int // buckets tracked now
	// Evictions counts the buckets dropped before they were full, to
	// honour the key cap. An evicted tenant starts again from a full
	// bucket.
	Evictions uint64
	// DrainedEvictions counts those of Evictions that had two fifths or
	// more of their burst spent, which includes every bucket at half or
	// more: tenants being throttled, or close to it, whom an eviction
	// hands a fresh burst. It stays 0 unless the cap is too small for the
	// tenants that are being limited (see WithMaxKeys).
	DrainedEvictions uint64
}

// New returns a Store configured by opts. An invalid option does not stop
// New: the Store's Check and Take return the error that names it.
func New(opts ...Option) *Store {
	cfg := config{maxKeys: DefaultMaxKeys, sweepInterval: DefaultSweepInterval}
	for i, o := range opts {
		if o == nil {
			cfg.fail("memory: option %d of New is nil", i)
			continue
		}
		o(&cfg)
	}
	s := &Store{stopper: &stopper{stop: make(chan struct{})}}
	if cfg.err != nil {
		s.err = cfg.err
		return s
	}
	b := newBuckets(cfg)
	s.b = b
	if cfg.sweepInterval > 0 {
		go b.sweepEvery(cfg.sweepInterval, s.stopper.stop)
		runtime.AddCleanup(s, func(st *stopper) { st.close() }, s.stopper)
	}
	return s
}

var errZeroStore error = &optionError{"memory: Store not made by memory.New"}

// Check reports whether the Store is usable: it returns the error of the
// first invalid option given to New (naming it, and wrapping
// tollgate.ErrMisconfigured), or nil. It does no I/O and ignores ctx. It
// implements tollgate.Checker: tollgate.New calls it, so that a
// misconfigured Store fails at start-up rather than on every request.
func (s *Store) Check(context.Context) error {
	if s.b != nil {
		return nil
	}
	return s.unusable()
}

// unusable returns why a Store without buckets has none.
func (s *Store) unusable() error {
	if s.err != nil {
		return s.err
	}
	return errZeroStore
}

// Take takes cost tokens from the bucket of key under limit. It implements
// tollgate.Store; ctx is not used, as Take never waits.
func (s *Store) Take(_ context.Context, key string, limit tollgate.Limit, cost int64) (tollgate.Result, error) {
	b := s.b
	if b == nil {
		return tollgate.Result{}, s.unusable()
	}
	ce := b.rules.find(limit, cost)
	if ce == nil || b.clock.test != nil {
		r, err := b.rules.get(limit, cost)
		if err != nil {
			return tollgate.Result{}, err
		}
		return b.take(key, 0, &r, cost, b.clock.now()), nil
	}
	return b.take(key, 0, &ce.rule, cost, readClock), nil
}

// TakeAt is Take at the time now, which must carry a monotonic clock
// reading, as time.Now's does; it saves the Store a clock read. A Store made
// WithClock ignores now and reads its own clock. Take's clock and time.Now
// agree within a few microseconds.
func (s *Store) TakeAt(_ context.Context, key string, limit tollgate.Limit, cost int64, now time.Time) (tollgate.Result, error) {
	b := s.b
	if b == nil {
		return tollgate.Result{}, s.unusable()
	}
	r, err := b.rules.get(limit, cost)
	if err != nil {
		return tollgate.Result{}, err
	}
	var us int64
	if b.clock.test != nil {
		us = b.clock.now()
	} else {
		us = b.clock.at(now)
	}
	return b.take(key, 0, &r, cost, us), nil
}

// NonBlocking marks the Store as one whose Take never waits on I/O.
func (*Store) NonBlocking() {}

// Sweep drops every bucket that is full again now and returns how many it
// dropped. The background sweeper calls it; calling it changes no decision.
func (s *Store) Sweep() int {
	if s.b == nil {
		return 0
	}
	return s.b.sweep()
}

// Stats returns the Store's counters.
func (s *Store) Stats() Stats {
	if s.b == nil {
		return Stats{}
	}
	return Stats{Keys: s.b.len(), Evictions: s.b.evictions.Load(), DrainedEvictions: s.b.drained.Load()}
}

// Close stops the background sweeper. The Store keeps working.
func (s *Store) Close() error {
	if s.stopper != nil {
		s.stopper.close()
	}
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
	tables    []atomic.Pointer[table] // shard i's table; what readers go through
	shards    []shard
	shardMask uint64
	seed      uintptr // of the key hash
	clock     clock
	rules     ruleCache
	evictions atomic.Uint64
	drained   atomic.Uint64
	tenants   tenantLocks // for Ops on several rules (ops.go)
}

// Shards hold about shardKeys buckets at the cap, so that making room in
// one (a pass over its table) stays short; there are at least minShards
// for a cap large enough, so that the insert path rarely waits.
const (
	shardKeys = 4096
	minShards = 256
	maxShards = 1 << 16
)

func newBuckets(cfg config) *buckets {
	// No shard so small (under 64 keys) that uneven hashing wastes much
	// of the key cap.
	n := 1
	for n < maxShards && n*2*64 <= cfg.maxKeys && (n < minShards || n*shardKeys < cfg.maxKeys) {
		n *= 2
	}
	b := &buckets{
		tables:    make([]atomic.Pointer[table], n),
		shards:    make([]shard, n),
		shardMask: uint64(n - 1),
		seed:      uintptr(rand.Uint64()),
		clock:     newClock(cfg.clock),
	}
	for i := range b.shards {
		sh := &b.shards[i]
		// The caps add up to maxKeys exactly.
		sh.cap = cfg.maxKeys / n
		if i < cfg.maxKeys%n {
			sh.cap++
		}
		sh.table = &b.tables[i]
		sh.table.Store(newTable(minSlots, 0))
	}
	return b
}

// readClock, as the time of a decision, makes buckets.take read the
// monotonic clock itself.
const readClock = -1

// take takes cost tokens at now from the bucket of key under r: one
// decision, whichever entry point it came through. flag is 0, but when
// takeDigest passes the SHA-256 of a key longer than maxInlineKey as key
// and digestFlag as flag. A negative now is readClock.
//
// The path of a tracked bucket is written out in full, with no lookup
// built and no call but the hash and the clock (table.find, table.holds
// and takeFrom, as the slow path calls them): the calls and the lookup
// cost 5 % of a hot-key Take. The slot's cache line is asked for with
// the intent to write it before the clock is read, so that it arrives
// meanwhile: read first, it would come shared from a core that wrote it
// last, and the compare-and-swap would need a second trip to that core
// (docs/performance.md).
func (b *buckets) take(key string, flag uint64, r *rule, cost, now int64) tollgate.Result {
	if len(key) > maxInlineKey {
		return b.takeDigest(key, r, cost, now)
	}
	p := unsafe.Pointer(unsafe.StringData(key))
	n := len(key)
	var short0, short1 uint64 // as lookup.short
	if uint(n-8) <= 8 {
		short0 = binary.LittleEndian.Uint64(unsafe.Slice((*byte)(p), 8))
		short1 = binary.LittleEndian.Uint64(unsafe.Slice((*byte)(unsafe.Add(p, n-8)), 8))
	}
	hash := uint64(memhash(p, b.seed, uintptr(n)))
	meta := metaOf(hash, flag, n)
	t := b.tables[hash&b.shardMask].Load()
	slots := t.slots
	i := t.home(meta)
	prefetchw(unsafe.Pointer(&slots[i]))
	if now < 0 {
		now = monoMicros()
	}
	for range len(slots) {
		sl := &slots[i]
		m := sl.meta.Load()
		if m&^refMask == meta {
			var same bool // t.holds(m, k)
			if l := m >> lengthShift & lengthMask; l-8 <= 8 {
				q := t.bytes(m)
				same = binary.LittleEndian.Uint64(unsafe.Slice((*byte)(q), 8)) == short0 &&
					binary.LittleEndian.Uint64(unsafe.Slice((*byte)(unsafe.Add(q, l-8)), 8)) == short1
			} else {
				same = t.key(m) == key
			}
			if same {
				for { // takeFrom(sl, r, cost, now) and r.take
					w := sl.word.Load()
					if w < 0 {
						break // dropped or moved: look again under the lock
					}
					debt := max(w&tatMask-now, 0)
					ahead := debt + cost*r.interval
					if ahead > r.tolerance {
						if w&throttledBit == 0 {
							// Losing this race changes no decision:
							// the flag only ranks buckets for eviction.
							sl.word.CompareAndSwap(w, w|throttledBit)
						}
						return r.denial(debt, ahead)
					}
					if sl.word.CompareAndSwap(w, r.scale|(now+ahead)) {
						return tollgate.Result{
							Allowed:    true,
							Remaining:  (r.tolerance - ahead) / r.interval,
							ResetAfter: time.Duration(ahead) * time.Microsecond,
						}
					}
				}
				break
			}
		} else if m == 0 {
			break
		}
		if i++; i == len(slots) {
			i = 0
		}
	}
	k := lookup{given: key, short: [2]uint64{short0, short1}, hash: hash, meta: meta}
	if flag&digestFlag != 0 {
		copy(k.digest[:], key)
	}
	return b.shards[hash&b.shardMask].takeLocked(b, &k, r, cost, now)
}

// takeDigest is take for a key stored as its SHA-256, kept apart so that
// the digest's room is set aside only for such keys.
func (b *buckets) takeDigest(key string, r *rule, cost, now int64) tollgate.Result {
	d := sha256.Sum256(unsafe.Slice(unsafe.StringData(key), len(key)))
	return b.take(unsafe.String(&d[0], len(d)), digestFlag, r, cost, now)
}

// takeFrom applies one decision to a tracked bucket. It reports false when
// the bucket was dropped or moved meanwhile, and the caller must look again
// under the shard's lock.
func takeFrom(sl *slot, r *rule, cost, now int64) (tollgate.Result, bool) {
	for {
		w := sl.word.Load()
		if w < 0 {
			return tollgate.Result{}, false
		}
		next, res := r.take(w, now, cost)
		if next == w {
			return res, true // denied, and already flagged
		}
		// A denial that loses the race to set the flag decides as it is:
		// the flag only ranks buckets for eviction.
		if sl.word.CompareAndSwap(w, next) || !res.Allowed {
			return res, true
		}
	}
}

// takeLocked is the slow path of take: it looks again under the lock and
// adds the bucket if it is still missing, making room first at the cap.
func (sh *shard) takeLocked(b *buckets, k *lookup, r *rule, cost, now int64) tollgate.Result {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.table.Load()
	if sl := t.find(k); sl != nil {
		// With the lock held no slot can be dropped or moved.
		res, _ := takeFrom(sl, r, cost, now)
		return res
	}
	w, res := r.take(0, now, cost)
	sh.admit(b, k.stored(), k.meta, w, now)
	return res
}

// admit adds a slot of stored bytes s, meta m and word w, making room first
// at the cap; sh.mu is held and the slot is missing.
func (sh *shard) admit(b *buckets, s string, m uint64, w, now int64) {
	for sh.live >= sh.cap {
		evicted, drained := sh.reclaim(now)
		b.evictions.Add(uint64(evicted))
		b.drained.Add(uint64(drained))
	}
	t := sh.table.Load()
	if (sh.used+1)*4 > len(t.slots)*3 {
		t = sh.rebuild(now)
	}
	sh.add(t, s, m, w)
}

func (b *buckets) sweep() int {
	now := b.clock.now()
	dropped := 0
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.Lock()
		dropped += sh.dropFull(now)
		if sh.used > 2*sh.live+minSlots {
			sh.rebuild(now)
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
