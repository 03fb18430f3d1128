package tollgate

import (
	"cmp"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/tollgate-go/tollgate/core/storekit"
)

// Slots of in-flight policies (Policy.InFlight) are leases in the store:
// a request that holds one renews it while it runs, so that the slots of
// a process that dies come free within leaseTTL; inFlightRetry is the
// Retry-After of a request refused for want of a slot, which no one can
// know: a slot frees when a request ends.
const (
	leaseTTL      = 10 * time.Second
	leaseRenewal  = leaseTTL / 3
	inFlightRetry = time.Second
	// slotPoll is how often a request waiting for a slot tries again
	// when no slot of its tenant was released in this process: another
	// replica's release is not announced.
	slotPoll = 50 * time.Millisecond
)

// newLease returns a lease name no other request draws: 128 random bits,
// as bytes, which every store keeps as they are.
func newLease() string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(b[8:], rand.Uint64())
	return string(b[:])
}

// A heldSlot is a slot this process holds, renewed while it is held; an
// empty lease marks a free entry of its shard.
type heldSlot struct {
	lease  string
	tenant string
	plan   string
	rules  []storekit.Rule // the InFlight rules the lease is in
	store  Store           // the store that granted it: the fallback's lease lives there
	where  any             // the store's note of where it keeps the slot (storekit.Op.Slot)
}

// slots is what a Limiter knows of the slots it holds and of the requests
// that wait for one. The slots held are split among shards by lease, so
// that requests on several cores seldom wait for one another's lock; a
// Decision that holds a slot knows its lease and its index in the shard,
// and entries are reused, so that holding a slot allocates nothing.
type slots struct {
	shards   [slotShards]paddedSlotShard
	renewing atomic.Bool // a goroutine renews the held leases

	waitMu  sync.Mutex
	waiting map[string][]chan struct{} // by tenant, in order of arrival
	queued  atomic.Int64               // requests in waiting: a release looks only if there are some

	renewEvery time.Duration // leaseRenewal; tests shorten it

	// counts holds, by plan, the slots held without a lease (of an
	// in-process store), a *slotCount each.
	counts sync.Map
}

// A slotCount counts the slots of one plan held without a lease, in
// shards, so that requests on different cores seldom move one counter
// from core to core.
type slotCount [countShards]struct {
	n atomic.Int64
	_ [56]byte
}

const countShards = 16

// countedBy is the slotCount that a Limiter keeps for a rule set's plan.
type countedBy struct {
	l *Limiter
	c *slotCount
}

// countHeld counts a slot held without a lease under rs, and returns its
// counter, for Release.
func (l *Limiter) countHeld(rs *ruleSet) *atomic.Int64 {
	cb := rs.counted.Load()
	if cb == nil || cb.l != l {
		// Rule sets are the resolver's, which Limiters may share.
		v, ok := l.slots.counts.Load(rs.plan)
		if !ok {
			v, _ = l.slots.counts.LoadOrStore(rs.plan, new(slotCount))
		}
		cb = &countedBy{l: l, c: v.(*slotCount)}
		rs.counted.Store(cb)
	}
	// The hint is the processor's own, mostly: sync.Pool keeps what a
	// processor put for it.
	hint := shardHints.Get().(*int)
	n := &cb.c[*hint].n
	shardHints.Put(hint)
	n.Add(1)
	return n
}

var (
	shardHints = sync.Pool{New: func() any {
		h := int(nextHint.Add(1) % countShards)
		return &h
	}}
	nextHint atomic.Uint32
)

const slotShards = 16

type slotShard struct {
	mu   sync.Mutex
	held []heldSlot
	free []int32 // indexes of free entries of held
}

// paddedSlotShard keeps each shard's lock on a cache line of its own.
type paddedSlotShard struct {
	slotShard
	_ [64 - unsafe.Sizeof(slotShard{})%64]byte
}

func (s *slots) shardOf(lease string) *slotShard {
	return &s.shards[lease[0]%slotShards].slotShard
}

// hold records a slot granted to d by op and makes sure it is renewed.
func (l *Limiter) hold(d *Decision, op *storekit.Op, rules []storekit.Rule) {
	s := &l.slots
	sh := s.shardOf(op.Lease)
	sh.mu.Lock()
	var at int32
	if n := len(sh.free); n > 0 {
		at, sh.free = sh.free[n-1], sh.free[:n-1]
	} else {
		at = int32(len(sh.held))
		sh.held = append(sh.held, heldSlot{})
	}
	sh.held[at] = heldSlot{lease: op.Lease, tenant: d.Tenant, plan: d.Plan, rules: rules, store: l.storeOf(d), where: op.Slot}
	sh.mu.Unlock()
	d.lease, d.slotAt = op.Lease, at
	// After the slot is in its shard, so that a renewer that found
	// none held and stops is followed by another.
	if !s.renewing.Load() && s.renewing.CompareAndSwap(false, true) {
		go l.renew(cmp.Or(s.renewEvery, leaseRenewal))
	}
}

// renew extends the leases held every period, while any is held, each in
// the store that granted it.
func (l *Limiter) renew(period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	s := &l.slots
	for range t.C {
		batch := s.snapshot()
		if len(batch) == 0 {
			s.renewing.Store(false)
			// A slot held since the snapshot may have seen this
			// goroutine still running: renew it here unless another
			// renewer has started.
			if len(s.snapshot()) == 0 || !s.renewing.CompareAndSwap(false, true) {
				return
			}
			continue
		}
		for _, h := range batch {
			ctx, cancel := context.WithTimeout(context.Background(), period)
			op := storekit.Op{Kind: storekit.Renew, Tenant: h.tenant, Rules: h.rules, Lease: h.lease, LeaseTTL: leaseTTL, Slot: h.where}
			_ = h.store.Do(ctx, &op) // a lease that fails to renew expires: its slot comes free
			cancel()
		}
	}
}

// snapshot returns the slots held now.
func (s *slots) snapshot() []heldSlot {
	var all []heldSlot
	for i := range s.shards {
		sh := &s.shards[i].slotShard
		sh.mu.Lock()
		for _, h := range sh.held {
			if h.lease != "" {
				all = append(all, h)
			}
		}
		sh.mu.Unlock()
	}
	return all
}

// Release gives back the slot that d holds in the in-flight policies of
// its plan (see Policy.InFlight) when the request has ended: middleware
// does it when the handler returns, even on a panic; code outside HTTP
// (a worker) calls it when its work is done. Releasing a decision that
// holds no slot, or twice, does nothing.
func (l *Limiter) Release(ctx context.Context, d *Decision) error {
	if l == nil {
		return errNilLimiter
	}
	if d.lease == "" {
		l.releaseHeld(d)
		return nil
	}
	h, ok := l.letGo(d)
	if !ok {
		return nil
	}
	op := ops.Get().(*storekit.Op)
	defer ops.Put(op)
	// Now is the decision's: a Release's figures are not used, so a
	// store on the caller's clock need not read it again.
	*op = storekit.Op{Kind: storekit.Release, Tenant: h.tenant, Rules: h.rules, Lease: h.lease, Slot: h.where, Now: d.Time, Results: op.Results[:0]}
	// The slot goes back even if the request's context has ended: the
	// client that left is the usual reason to release.
	if ctx.Done() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	err := h.store.Do(ctx, op)
	l.wakeFirst(h.tenant)
	return err
}

// A heldSlots is the slots of one Decision held without a lease. Its gen
// moves on when they are given back, so that a copy of the Decision, which
// holds the gen of before, gives back nothing; records are reused, so that
// holding a slot allocates nothing.
type heldSlots struct {
	gen   atomic.Uint64
	held  storekit.Held
	count *atomic.Int64 // the plan's count, of SlotsHeld
}

var heldRecords = sync.Pool{New: func() any { return new(heldSlots) }}

// holdUnleased records in d the slots h that the store granted without a
// lease, under rs.
func (l *Limiter) holdUnleased(d *Decision, rs *ruleSet, h storekit.Held) {
	rec := heldRecords.Get().(*heldSlots)
	rec.held, rec.count = h, l.countHeld(rs)
	d.held, d.heldGen = rec, rec.gen.Load()
}

// releaseHeld gives back the slots that d holds without a lease, if any.
func (l *Limiter) releaseHeld(d *Decision) {
	rec, gen := d.held, d.heldGen
	if rec == nil {
		return
	}
	d.held = nil
	// A copy of d released already has moved gen on.
	if !rec.gen.CompareAndSwap(gen, gen+1) {
		return
	}
	h, n := rec.held, rec.count
	rec.held, rec.count = nil, nil
	heldRecords.Put(rec)
	h.Release()
	n.Add(-1)
	l.wakeFirst(d.Tenant)
}

// letGo drops the slot of d from the slots held, and returns what it
// held; it reports false for a slot not held here: a copy of a Decision
// released already, or one of another Limiter.
func (l *Limiter) letGo(d *Decision) (heldSlot, bool) {
	lease, at := d.lease, d.slotAt
	d.lease = ""
	sh := l.slots.shardOf(lease)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if at < 0 || int(at) >= len(sh.held) || sh.held[at].lease != lease {
		return heldSlot{}, false
	}
	h := sh.held[at]
	sh.held[at] = heldSlot{}
	sh.free = append(sh.free, at)
	return h, true
}

// wakeFirst lets the first request of tenant that waits for a slot try
// again.
func (l *Limiter) wakeFirst(tenant string) {
	s := &l.slots
	if s.queued.Load() == 0 {
		return
	}
	s.waitMu.Lock()
	defer s.waitMu.Unlock()
	if q := s.waiting[tenant]; len(q) > 0 {
		select {
		case q[0] <- struct{}{}:
		default:
		}
	}
}

// storeOf returns the store that decided d: the fallback's if the main
// store failed.
func (l *Limiter) storeOf(d *Decision) Store {
	if d.Fallback {
		return l.fallback
	}
	return l.store
}

// forget drops the slot of d, which the store gave back already, from the
// slots held.
func (l *Limiter) forget(d *Decision) {
	if h, ok := l.letGo(d); ok {
		l.wakeFirst(h.tenant)
	}
}

// waitForSlot waits, in order of arrival among this process's requests of
// tenant, until a slot of the tenant may have come free: one was released
// here, or slotPoll has passed (another replica's release is not
// announced). It returns ctx's error if ctx ends first.
func (l *Limiter) waitForSlot(ctx context.Context, tenant string, turn chan struct{}) error {
	t := time.NewTimer(slotPoll)
	defer t.Stop()
	for {
		first := l.firstInLine(tenant, turn)
		select {
		case <-turn:
			if first {
				return nil
			}
		case <-t.C:
			if first {
				return nil
			}
			t.Reset(slotPoll)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// queueForSlot puts a request of tenant in line for a slot; leave takes it
// out, and lets the next one try.
func (l *Limiter) queueForSlot(tenant string) (turn chan struct{}, leave func()) {
	turn = make(chan struct{}, 1)
	s := &l.slots
	s.waitMu.Lock()
	if s.waiting == nil {
		s.waiting = make(map[string][]chan struct{})
	}
	s.waiting[tenant] = append(s.waiting[tenant], turn)
	s.queued.Add(1)
	s.waitMu.Unlock()
	return turn, func() {
		s.waitMu.Lock()
		defer s.waitMu.Unlock()
		s.queued.Add(-1)
		q := s.waiting[tenant]
		for i, c := range q {
			if c == turn {
				q = append(q[:i:i], q[i+1:]...)
				break
			}
		}
		if len(q) == 0 {
			delete(s.waiting, tenant)
			return
		}
		s.waiting[tenant] = q
		select {
		case q[0] <- struct{}{}:
		default:
		}
	}
}

func (l *Limiter) firstInLine(tenant string, turn chan struct{}) bool {
	s := &l.slots
	s.waitMu.Lock()
	defer s.waitMu.Unlock()
	q := s.waiting[tenant]
	return len(q) > 0 && q[0] == turn
}

// SlotsHeld returns how many slots of in-flight policies this Limiter's
// requests hold now, by plan, for metrics.
func (l *Limiter) SlotsHeld() map[string]int {
	if l == nil {
		return nil
	}
	out := make(map[string]int)
	for _, h := range l.slots.snapshot() {
		out[h.plan]++
	}
	l.slots.counts.Range(func(plan, v any) bool {
		var n int64
		for i := range v.(*slotCount) {
			n += v.(*slotCount)[i].n.Load()
		}
		if n > 0 {
			out[plan.(string)] += int(n)
		}
		return true
	})
	return out
}
