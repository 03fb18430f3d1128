package tollgate

import (
	"cmp"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"time"

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

// A heldSlot is a slot this process holds, renewed while it is held.
type heldSlot struct {
	tenant string
	plan   string
	rules  []storekit.Rule // the InFlight rules the lease is in
	store  Store           // the store that granted it: the fallback's lease lives there
}

// slots is what a Limiter knows of the slots it holds and of the requests
// that wait for one.
type slots struct {
	mu       sync.Mutex
	held     map[string]heldSlot // by lease
	renewing bool                // a goroutine renews the held leases
	waiting  map[string][]chan struct{}

	renewEvery time.Duration // leaseRenewal; tests shorten it
}

// hold records a slot granted to d and starts renewing it.
func (l *Limiter) hold(d *Decision, lease string, rules []storekit.Rule) {
	d.lease = lease
	s := &l.slots
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == nil {
		s.held = make(map[string]heldSlot)
	}
	s.held[lease] = heldSlot{tenant: d.Tenant, plan: d.Plan, rules: rules, store: l.storeOf(d)}
	if !s.renewing {
		s.renewing = true
		go l.renew(cmp.Or(s.renewEvery, leaseRenewal))
	}
}

// renew extends the leases held every period, while any is held, each in
// the store that granted it.
func (l *Limiter) renew(period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for range t.C {
		s := &l.slots
		s.mu.Lock()
		if len(s.held) == 0 {
			s.renewing = false
			s.mu.Unlock()
			return
		}
		batch := make(map[string]heldSlot, len(s.held))
		for lease, h := range s.held {
			batch[lease] = h
		}
		s.mu.Unlock()
		for lease, h := range batch {
			ctx, cancel := context.WithTimeout(context.Background(), period)
			op := storekit.Op{Kind: storekit.Renew, Tenant: h.tenant, Rules: h.rules, Lease: lease, LeaseTTL: leaseTTL}
			_ = h.store.Do(ctx, &op) // a lease that fails to renew expires: its slot comes free
			cancel()
		}
	}
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
		return nil
	}
	lease := d.lease
	d.lease = ""
	h, ok := l.letGo(lease)
	if !ok {
		return nil
	}
	op := ops.Get().(*storekit.Op)
	defer ops.Put(op)
	*op = storekit.Op{Kind: storekit.Release, Tenant: h.tenant, Rules: h.rules, Lease: lease, Now: l.now(), Results: op.Results[:0]}
	// The slot goes back even if the request's context has ended: the
	// client that left is the usual reason to release.
	if ctx.Done() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	return h.store.Do(ctx, op)
}

// letGo drops lease from the slots held, wakes the first request of its
// tenant that waits for one, and returns what the slot held.
func (l *Limiter) letGo(lease string) (heldSlot, bool) {
	s := &l.slots
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.held[lease]
	if !ok {
		return h, false
	}
	delete(s.held, lease)
	if q := s.waiting[h.tenant]; len(q) > 0 {
		select {
		case q[0] <- struct{}{}:
		default:
		}
	}
	return h, true
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
	l.letGo(d.lease)
	d.lease = ""
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
	s.mu.Lock()
	if s.waiting == nil {
		s.waiting = make(map[string][]chan struct{})
	}
	s.waiting[tenant] = append(s.waiting[tenant], turn)
	s.mu.Unlock()
	return turn, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
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
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.waiting[tenant]
	return len(q) > 0 && q[0] == turn
}

// SlotsHeld returns how many slots of in-flight policies this Limiter's
// requests hold now, by plan, for metrics.
func (l *Limiter) SlotsHeld() map[string]int {
	if l == nil {
		return nil
	}
	s := &l.slots
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int)
	for _, h := range s.held {
		out[h.plan]++
	}
	return out
}
