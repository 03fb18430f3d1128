package memory

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	tollgate "github.com/tollgate-go/tollgate/core"
)

var _ tollgate.MultiStore = (*Store)(nil)

// Do applies op, one atomic step on the rules of one key (see
// tollgate.MultiStore): the tenant's main bucket is the one Take keeps
// under the key; the other rules live in slots of their own. A take of the
// main bucket alone is Take at op.Now, unless it reserves; every other Op is
// decided on the states of all its rules at once and written back only if
// none changed meanwhile, under the tenant's lock when it touches more than
// the main bucket (doc.go tells why that is atomic). Do neither waits on
// I/O nor allocates for a tenant it tracks; ctx is not used.
//
// A Store made WithClock ignores op.Now and reads its own clock.
func (s *Store) Do(_ context.Context, op *tollgate.Op) error {
	b := s.b
	if b == nil {
		return s.unusable()
	}
	if op.Kind == tollgate.OpTake && len(op.Rules) == 1 {
		if r := &op.Rules[0]; r.Sub == "" && r.Quota.IsZero() {
			err := b.takeMain(op, r.Limit)
			// A reservation whose tokens are there is a take, and a
			// denied take changed nothing: only one that must wait
			// needs the general path (Limiter.Wait, mostly, which
			// should cost a Take when it does not wait).
			if op.MaxDelay <= 0 || err != nil || op.Allowed {
				return err
			}
		}
	}
	return b.do(op)
}

// takeMain is the path of an OpTake of the main bucket alone, which
// decides exactly as Take does.
func (b *buckets) takeMain(op *tollgate.Op, limit tollgate.Limit) error {
	cost := max(op.Cost, 1)
	r, err := b.rules.get(limit, cost)
	if err != nil {
		return err
	}
	now := b.clock.opNow(op.Now)
	res := b.take(op.Key, 0, &r, cost, now)
	op.Allowed, op.Delay = res.Allowed, 0
	op.Results = append(op.Results[:0], res)
	op.Marks = op.Marks[:0]
	if res.Allowed {
		// The bucket's new TAT, which OpCancel compares with its TAT then.
		op.Marks = append(op.Marks, now+int64(res.ResetAfter/time.Microsecond))
	}
	return nil
}

// opNow returns the time of an Op on the Store's clock: the clock of
// WithClock, t, or if t is zero the monotonic clock.
func (c *clock) opNow(t time.Time) int64 {
	if c.test != nil {
		return c.at(c.test())
	}
	if t.IsZero() {
		return monoMicros()
	}
	return c.at(t)
}

// opTimes returns the time of an Op on the Store's clock, as opNow does,
// and the same instant as wall-clock µs since the Unix epoch, which quota
// periods are counted in.
func (c *clock) opTimes(t time.Time) (now, wall int64) {
	switch {
	case c.test != nil:
		t = c.test()
	case t.IsZero():
		t = time.Now()
	}
	return c.at(t), t.UnixMicro()
}

// Slots of rules other than a tenant's main bucket are told apart from
// main buckets by flags in their meta (see table.go), so that no tenant
// key, whatever its bytes, can reach them; their stored bytes are the
// rule's identity (ruleKey.set).
const (
	ruleFlag  = 1 << 31 // a rule other than the main bucket
	quotaFlag = 1 << 30 // its word counts a quota's period, not a TAT

	// hintBytes lead the stored bytes of a quota's slot: when the slot
	// may be dropped, in µs of the Store's clock (expired). They are no
	// part of the identity.
	hintBytes = 8
	// startBytes hold a quota period's start, whole seconds since the
	// Unix epoch modulo 2^40 (some 17,000 years either way).
	startBytes = 5

	// quotaLinger keeps a quota's state for this long after its period
	// ends, so that a decision whose time reads a little early (another
	// goroutine's clock, a wall clock stepped back) still finds it.
	quotaLinger = time.Minute
)

// A ruleKey is the lookup of a rule other than the main bucket.
type ruleKey struct {
	bytes [maxInlineKey]byte // stored: the hint of a quota, then the identity or its SHA-256
	n     int                // stored length
	skip  int                // leading bytes that are no part of the identity
	hash  uint64
	meta  uint64
}

// set makes rk the lookup of rule sub of the key k: for a quota, of its
// period starting at start (wall µs), with the hint expires (Store µs). The
// identity is the period's start (quotas), the key (or its SHA-256, as the
// main bucket stores it), sub (or its SHA-256 past maxInlineKey) and a byte
// that tells where the two meet, so that no two rules share one; an
// identity too long to store is stored as its SHA-256, which the digest
// flag keeps apart from stored bytes that are not a digest.
func (rk *ruleKey) set(seed uintptr, k *lookup, sub string, quota bool, start, expires int64) {
	flags := uint64(ruleFlag)
	rk.skip = 0
	var period [8]byte
	if quota {
		binary.LittleEndian.PutUint64(period[:], uint64(floorDiv(start, 1e6)))
		binary.LittleEndian.PutUint64(rk.bytes[:], uint64(expires))
		flags |= quotaFlag
		rk.skip = hintBytes
	}
	stored := k.stored()
	code := byte(len(sub)) // 0 to maxInlineKey, or a digest
	var subDigest [sha256.Size]byte
	if len(sub) > maxInlineKey {
		subDigest = sha256.Sum256(unsafe.Slice(unsafe.StringData(sub), len(sub)))
		sub = unsafe.String(&subDigest[0], len(subDigest))
		code = maxInlineKey + 1
	}
	if k.meta&digestFlag != 0 {
		code |= 0x80
	}
	n := len(stored) + len(sub) + 1
	if quota {
		n += startBytes
	}
	// The identity is built where it is stored when it fits, which spares
	// a copy of it; only a longer one needs room of its own, to be hashed.
	if n <= maxInlineKey-rk.skip {
		appendIdentity(rk.bytes[rk.skip:rk.skip], quota, &period, stored, sub, code)
	} else {
		var long [startBytes + maxInlineKey + maxInlineKey + 1]byte
		d := sha256.Sum256(appendIdentity(long[:0], quota, &period, stored, sub, code))
		n = copy(rk.bytes[rk.skip:], d[:])
		flags |= digestFlag
	}
	rk.n = rk.skip + n
	rk.hash = uint64(memhash(unsafe.Pointer(&rk.bytes[rk.skip]), seed, uintptr(n)))
	rk.meta = metaOf(rk.hash, flags, rk.n)
}

// appendIdentity appends the identity of a rule to dst: the first
// startBytes of period for a quota, the tenant's stored bytes, the rule's
// sub (or its SHA-256) and code, which tells where the two meet.
func appendIdentity(dst []byte, quota bool, period *[8]byte, stored, sub string, code byte) []byte {
	if quota {
		dst = append(dst, period[:startBytes]...)
	}
	dst = append(dst, stored...)
	dst = append(dst, sub...)
	return append(dst, code)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// identity returns the bytes that tell rk's rule apart.
func (rk *ruleKey) identity() string {
	return unsafe.String(&rk.bytes[rk.skip], rk.n-rk.skip)
}

// stored returns the bytes the table keeps for rk.
func (rk *ruleKey) stored() string {
	return unsafe.String(&rk.bytes[0], rk.n)
}

// findRule returns the live slot of rk, or nil. It takes no lock.
func (t *table) findRule(rk *ruleKey) *slot {
	n := len(t.slots)
	i := t.home(rk.meta)
	for range n {
		sl := &t.slots[i]
		m := sl.meta.Load()
		if m == 0 {
			return nil
		}
		if m&^refMask == rk.meta && t.key(m)[rk.skip:] == rk.identity() && sl.word.Load() != deadWord {
			return sl
		}
		if i++; i == n {
			i = 0
		}
	}
	return nil
}

// expired reports whether the slot with meta m and word w (not a marker)
// may be dropped at now without changing a decision: a bucket that is full
// again, a quota whose period has ended (its hint has passed).
func (t *table) expired(m uint64, w, now int64) bool {
	if m&quotaFlag != 0 {
		return int64(binary.LittleEndian.Uint64(unsafe.Slice((*byte)(t.bytes(m)), hintBytes))) <= now
	}
	return w&tatMask <= now
}

// spentOf is spent for any slot: for a quota, the share of its tokens used
// in the period.
func spentOf(m uint64, w, now int64) float64 {
	if m&quotaFlag != 0 {
		return float64(w&tatMask) * invScales[uint64(w)>>scaleShift]
	}
	return spent(w, now)
}

// tenantLocks serialise the Ops of one tenant that touch more than its
// main bucket; tenants share a stripe by their key's hash.
type tenantLocks [tenantStripes]struct {
	sync.Mutex
	_ [56]byte // a stripe per cache line
}

const tenantStripes = 128

func (l *tenantLocks) of(k *lookup) *sync.Mutex {
	// The shard takes the hash's low bits and the tag its high ones.
	return &l[k.hash>>20%tenantStripes].Mutex
}

// inlineRules is how many rules an Op may have without Do allocating.
const inlineRules = 4

// What kind of state an opRule has.
const (
	mainBucket = iota // the tenant's main bucket, Take's
	subBucket         // a token bucket of its own
	quotaCount        // a quota's count in one period
)

// An opRule is one rule of an Op in the making: its figures, where its
// state is, and the state read.
type opRule struct {
	kind       uint8
	interval   int64 // bucket: µs a token; quota: unused
	tol        int64 // bucket: Burst × interval; quota: Tokens
	scale      int64 // of tol, as a bucket word holds it
	start, end int64 // quota: the period, wall µs
	key        ruleKey

	sl   *slot // nil if the state is missing (a full bucket, an unused quota)
	w    int64 // sl's word when read
	val  int64 // bucket: µs from full; quota: tokens used
	next int64 // the word to write
	put  bool  // write next
}

// do applies any Op: it reads the state of every rule, decides as
// storetest.Model does, and writes; if the main bucket changed meanwhile (a
// Take raced it), it starts again.
func (b *buckets) do(op *tollgate.Op) error {
	switch op.Kind {
	case tollgate.OpTake, tollgate.OpInspect, tollgate.OpReset, tollgate.OpCancel:
	default:
		return fmt.Errorf("memory: unknown Op kind %v", op.Kind)
	}
	cost := max(op.Cost, 1)
	now, wall := b.clock.opTimes(op.Now)
	var k lookup
	k.set(b.seed, op.Key)
	var inline [inlineRules]opRule
	rs := inline[:0]
	if len(op.Rules) > inlineRules {
		rs = make([]opRule, 0, len(op.Rules))
	}
	locked := false
	for i := range op.Rules {
		rs = rs[:i+1]
		r, src := &rs[i], &op.Rules[i]
		if !src.Quota.IsZero() {
			q := &src.Quota
			if err := q.Validate(); err != nil {
				return err
			}
			r.kind, r.tol, r.scale = quotaCount, q.Tokens, scaleOf(q.Tokens)
			if op.Kind == tollgate.OpCancel {
				// The period the reservation counted in.
				r.start = markOf(op.Marks, i)
				_, end := q.Bounds(time.UnixMicro(r.start))
				r.end = end.UnixMicro()
			} else {
				r.start, r.end = periods.bounds(q, wall)
			}
			expires := now + r.end - wall + int64(quotaLinger/time.Microsecond)
			r.key.set(b.seed, &k, src.Sub, true, r.start, clamp(expires))
			locked = true
			continue
		}
		lr, err := b.rules.get(src.Limit, 1) // a cost above Burst is denied, as Model does
		if err != nil {
			return err
		}
		r.kind, r.interval, r.tol, r.scale = mainBucket, lr.interval, lr.tolerance, lr.scale
		if src.Sub != "" {
			r.kind = subBucket
			r.key.set(b.seed, &k, src.Sub, false, 0, 0)
			locked = true
		}
	}
	if locked {
		mu := b.tenants.of(&k)
		mu.Lock()
		defer mu.Unlock()
	}
	maxDelay := min(max(op.MaxDelay, 0), tollgate.MaxWindow).Microseconds()
	for !b.apply(op, rs, &k, cost, maxDelay, now, wall) {
	}
	return nil
}

// apply makes one attempt at op: it reads, decides, and writes the main
// bucket by compare-and-swap, then the other rules. It reports false, having
// written nothing, if the main bucket changed since it was read.
func (b *buckets) apply(op *tollgate.Op, rs []opRule, k *lookup, cost, maxDelay, now, wall int64) bool {
	main := -1 // the last rule of the main bucket: the one written
	for i := range rs {
		r := &rs[i]
		r.put = false
		if r.kind == mainBucket {
			r.sl, r.w = b.load(k)
			main = i
		} else {
			r.sl, r.w = b.loadRule(&r.key)
		}
		if r.kind == quotaCount {
			r.val = r.w & tatMask
		} else {
			r.val = max(r.w&tatMask-now, 0)
		}
	}

	switch op.Kind {
	case tollgate.OpReset:
		for i := range rs {
			r := &rs[i]
			r.val, r.next, r.put = 0, 0, r.sl != nil
		}
	case tollgate.OpCancel:
		cancel(op, rs, cost, now)
	}
	allowed := true
	var delay int64
	for i := range rs {
		r := &rs[i]
		if r.kind == quotaCount {
			if op.Kind == tollgate.OpCancel && r.end <= wall {
				r.val = 0 // the period has ended: a new one begins
			}
			if r.val+cost > r.tol {
				allowed = false
			}
			continue
		}
		if wait := r.val + cost*r.interval - r.tol; wait > 0 {
			delay = max(delay, wait)
			if wait > maxDelay {
				allowed = false
			}
		}
	}
	granted := op.Kind == tollgate.OpTake && allowed
	if granted {
		for i := range rs {
			r := &rs[i]
			if r.kind == quotaCount {
				r.next = r.scale | (r.val + cost)
			} else {
				r.next = r.scale | (now + r.val + cost*r.interval)
			}
			r.put = true
		}
	}

	// The main bucket first: once it is written, the Op is.
	if main >= 0 {
		if r := &rs[main]; r.put {
			if r.sl == nil {
				if !b.insert(k, r.next, now) {
					return false
				}
			} else if !r.sl.word.CompareAndSwap(r.w, r.next) {
				return false
			}
		}
	}
	for i := range rs {
		if r := &rs[i]; r.put && r.kind != mainBucket {
			b.putRule(&r.key, r.sl, r.w, r.next, now, granted)
		}
	}
	if op.Kind == tollgate.OpTake && !allowed {
		flagDenials(rs, cost, maxDelay)
	}
	results(op, rs, granted, allowed, delay, cost, now, wall)
	return true
}

// cancel works out what an OpCancel gives back, as storetest.Model does:
// nothing once the reserved time (the latest mark less its tolerance) has
// come; otherwise each bucket its need less what later requests took on
// top of it, and each quota its cost.
func cancel(op *tollgate.Op, rs []opRule, cost, now int64) {
	act, buckets := int64(0), false
	for i := range rs {
		if r := &rs[i]; r.kind != quotaCount {
			act = max(act, markOf(op.Marks, i)-r.tol)
			buckets = true
		}
	}
	if !buckets || now >= act {
		return
	}
	for i := range rs {
		r := &rs[i]
		if r.sl == nil {
			continue // nothing to give back to a full bucket or an unused quota
		}
		if r.kind == quotaCount {
			if back := min(cost, r.val); back > 0 {
				r.val -= back
				r.next, r.put = r.w&^tatMask|r.val, true
			}
			continue
		}
		need := cost * r.interval
		tat := now + r.val
		if back := min(need, need-(tat-markOf(op.Marks, i))); back > 0 {
			tat -= back
			if tat <= now {
				r.val, r.next = 0, 0
			} else {
				r.val, r.next = tat-now, r.w&^tatMask|tat
			}
			r.put = true
		}
	}
}

// flagDenials marks the rules that denied a take as throttled, which ranks
// them last for eviction. Losing a race to set the flag changes no
// decision.
func flagDenials(rs []opRule, cost, maxDelay int64) {
	for i := range rs {
		r := &rs[i]
		var denies bool
		if r.kind == quotaCount {
			denies = r.val+cost > r.tol
		} else {
			denies = r.val+cost*r.interval-r.tol > maxDelay
		}
		if denies && r.sl != nil && r.w&throttledBit == 0 {
			r.sl.word.CompareAndSwap(r.w, r.w|throttledBit)
		}
	}
}

// results fills in op's answer from the states in rs.
func results(op *tollgate.Op, rs []opRule, granted, allowed bool, delay, cost, now, wall int64) {
	op.Results = op.Results[:0]
	op.Marks = op.Marks[:0]
	op.Allowed, op.Delay = false, 0
	for i := range rs {
		r := &rs[i]
		var res tollgate.Result
		switch {
		case r.kind == quotaCount && granted:
			res = tollgate.Result{Allowed: true, Remaining: max(r.tol-r.val-cost, 0), ResetAfter: micros(r.end - wall)}
			op.Marks = append(op.Marks, r.start)
		case r.kind == quotaCount:
			over := r.val+cost > r.tol
			res = tollgate.Result{Allowed: !over, Remaining: max(r.tol-r.val, 0)}
			if over {
				res.RetryAfter = micros(r.end - wall)
			}
			if r.val > 0 {
				res.ResetAfter = micros(r.end - wall)
			}
		case granted:
			ahead := r.val + cost*r.interval
			res = tollgate.Result{Allowed: true, Remaining: max(r.tol-ahead, 0) / r.interval, ResetAfter: micros(ahead)}
			op.Marks = append(op.Marks, now+ahead)
		default:
			wait := r.val + cost*r.interval - r.tol
			res = tollgate.Result{Allowed: wait <= 0, Remaining: max(r.tol-r.val, 0) / r.interval,
				RetryAfter: micros(max(wait, 0)), ResetAfter: micros(r.val)}
		}
		op.Results = append(op.Results, res)
	}
	if op.Kind == tollgate.OpTake || op.Kind == tollgate.OpInspect {
		op.Allowed = allowed
		if allowed {
			op.Delay = micros(delay)
		}
	}
}

func markOf(marks []int64, i int) int64 {
	if i < len(marks) {
		return marks[i]
	}
	return 0
}

// load returns the slot of the main bucket of k and its word, or nil and
// the word of a full bucket if k has none.
func (b *buckets) load(k *lookup) (*slot, int64) {
	return b.loadFound(k.hash, func(t *table) *slot { return t.find(k) })
}

// loadRule is load for a rule other than the main bucket.
func (b *buckets) loadRule(rk *ruleKey) (*slot, int64) {
	return b.loadFound(rk.hash, func(t *table) *slot { return t.findRule(rk) })
}

// loadFound is load and loadRule: the slot that find finds in the table of
// the shard of hash, and its word.
func (b *buckets) loadFound(hash uint64, find func(*table) *slot) (*slot, int64) {
	sh := &b.shards[hash&b.shardMask]
	sl := find(sh.table.Load())
	if sl == nil {
		return nil, 0
	}
	if w := sl.word.Load(); w >= 0 {
		return sl, w
	}
	// Dropped or moved meanwhile: look again under the lock, which no
	// table changes under.
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sl = find(sh.table.Load()); sl == nil {
		return nil, 0
	}
	return sl, sl.word.Load()
}

// insert adds the main bucket of k in state w, unless a Take added it
// meanwhile, which it reports by returning false.
func (b *buckets) insert(k *lookup, w, now int64) bool {
	sh := &b.shards[k.hash&b.shardMask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.table.Load().find(k) != nil {
		return false
	}
	sh.admit(b, k.stored(), k.meta, w, now)
	return true
}

// putRule writes w into the slot of rk, read as sl holding old (nil if
// missing). The tenant's lock is held, so only the shard's maintenance can
// have changed the slot meanwhile (dropped or moved it): then it writes
// into the slot the rule has now or, if add, a new one.
func (b *buckets) putRule(rk *ruleKey, sl *slot, old, w, now int64, add bool) {
	if sl != nil && sl.word.CompareAndSwap(old, w) {
		return
	}
	sh := &b.shards[rk.hash&b.shardMask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sl := sh.table.Load().findRule(rk); sl != nil {
		// Nothing else writes it: the shard's writers wait on the lock,
		// and the rule's on the tenant's.
		sl.word.Store(w)
		return
	}
	if add {
		sh.admit(b, rk.stored(), rk.meta, w, now)
	}
}

// periods caches the bounds of the quota periods in use: computing them
// takes a calendar, which costs more than the rest of a decision.
var periods periodCache

type periodCache struct {
	entries [8]atomic.Pointer[cachedPeriod]
	next    atomic.Uint32
}

// A cachedPeriod is one period of a calendar; it never changes once made.
type cachedPeriod struct {
	period     tollgate.Period
	loc        *time.Location
	anchor     int
	start, end int64 // wall µs
}

// bounds returns the period of q that holds wall (µs since the Unix epoch)
// as q.Bounds does, in µs.
func (c *periodCache) bounds(q *tollgate.Quota, wall int64) (start, end int64) {
	for i := range c.entries {
		if p := c.entries[i].Load(); p != nil && p.start <= wall && wall < p.end &&
			p.period == q.Period && p.loc == q.Location && p.anchor == q.AnchorDay {
			return p.start, p.end
		}
	}
	// Periods start on whole seconds, so the µs before wall's next one
	// is in the same period.
	s, e := q.Bounds(time.UnixMicro(wall))
	p := &cachedPeriod{period: q.Period, loc: q.Location, anchor: q.AnchorDay, start: s.UnixMicro(), end: e.UnixMicro()}
	c.entries[(c.next.Add(1)-1)%uint32(len(c.entries))].Store(p)
	return p.start, p.end
}
