package memory

import (
	"sync/atomic"

	"github.com/tollgate-go/tollgate/core/storekit"
)

// cappedTake reports whether op is a Take of a tenant's main bucket and of
// in-flight caps of distinct names alone: the Take of every request of a
// plan with an in-flight cap, which takeCapped decides without the working
// copies of doRules.
func cappedTake(op *storekit.Op) bool {
	rules := op.Rules
	if op.Kind != storekit.Take || len(rules) < 2 ||
		rules[0].Kind != storekit.Bucket || rules[0].Name != "" {
		return false
	}
	for i := 1; i < len(rules); i++ {
		if rules[i].Kind != storekit.InFlight {
			return false
		}
		for j := 1; j < i; j++ {
			if rules[j].Name == rules[i].Name {
				return false
			}
		}
	}
	return true
}

// takeCapped applies a Take that cappedTake accepts, as apply would: under
// the tenant's lock, so that no other Op changes its caps meanwhile, it
// checks the caps, then takes from the main bucket by compare-and-swap (a
// lock-free Take may move it) and, if granted, holds a slot of every cap.
func (tb *table) takeCapped(op *storekit.Op) {
	t := tb.clock.bucketTime(op.Now)
	var k lookup
	tb.lookup(op.Tenant, &k)
	for {
		tn := k.find()
		if tn == nil {
			tn = tb.insert(&k)
		}
		tn.mu.Lock()
		if tn.tat.Load() == deadTAT {
			tn.mu.Unlock()
			continue
		}
		takeCappedLocked(tn, op, t)
		tn.mu.Unlock()
		return
	}
}

// takeCappedLocked is takeCapped on tn, whose lock is held.
func takeCappedLocked(tn *tenant, op *storekit.Op, t int64) {
	bucket, caps := &op.Rules[0], op.Rules[1:]
	cost := max(op.Cost, 1)
	free := true
	for i := range caps {
		if s := tn.inFlight(caps[i].Name); s != nil {
			s.prune(t)
			free = free && s.inFlight() < caps[i].Burst
		}
	}
	maxDelay := max(op.MaxDelay, 0).Microseconds()
	var tat, wait int64
	for {
		tat = tn.tat.Load()
		wait = bucketWait(tat, t, bucket, cost)
		if !free || wait > maxDelay || tn.tat.CompareAndSwap(tat, t+max(tat-t, 0)+cost*bucket.Interval) {
			break
		}
		// A lock-free Take moved the bucket first: decide again.
	}
	granted := free && wait <= maxDelay
	res, _ := bucketResult(tat, t, bucket, cost, granted)
	op.Results = append(op.Results[:0], res)
	op.Allowed, op.Delay = granted, 0
	noLease := unleased(op)
	var h *held
	if granted {
		tn.noteTolerance(bucket.Tolerance())
		delay := max(wait, 0)
		op.Delay, op.Mark, op.Slot = usec(delay), t+delay, tn
		if noLease {
			h = &held{}
			op.Slot = h
		}
	}
	expires := t + op.LeaseTTL.Microseconds()
	for i := range caps {
		r := &caps[i]
		s := tn.inFlight(r.Name)
		if granted {
			if s == nil {
				s = tn.addInFlight(r.Name)
			}
			s.size = r.Burst
			if noLease {
				if s.unleased == nil {
					s.unleased = newCounter()
				}
				s.unleased.Add(1)
				h.add(s.unleased)
			} else {
				s.setLease(op.Lease, expires)
			}
		}
		held := int64(0)
		if s != nil {
			held = s.inFlight()
		}
		op.Results = append(op.Results, storekit.Result{Allowed: granted || held < r.Burst, Remaining: max(r.Burst-held, 0)})
	}
}

// addInFlight gives tn an empty state of the in-flight cap called name,
// and returns it. tn.mu is held.
func (tn *tenant) addInFlight(name string) *ruleState {
	if tn.others == nil {
		tn.others = new([]ruleState)
	}
	*tn.others = append(*tn.others, ruleState{name: name, kind: storekit.InFlight, tat: fullTAT})
	return &(*tn.others)[len(*tn.others)-1]
}

// A held is the slots that one Take without a lease holds: a
// storekit.Held. It counts on in the caps' counters even if its tenant is
// dropped meanwhile (evicted at the Store's cap), which no one reads then.
type held struct {
	first    *atomic.Int64 // the counter of its first cap
	more     []*atomic.Int64
	released atomic.Bool
}

// add adds the counter of a cap in which the slot is held.
func (h *held) add(n *atomic.Int64) {
	if h.first == nil {
		h.first = n
	} else {
		h.more = append(h.more, n)
	}
}

// Release gives the slots back, once.
func (h *held) Release() bool {
	if h.released.Swap(true) {
		return false
	}
	h.first.Add(-1)
	for _, n := range h.more {
		n.Add(-1)
	}
	return true
}

// newCounter returns a counter on a cache line of its own, so that the
// counters of tenants served on different cores do not slow each other.
func newCounter() *atomic.Int64 {
	return &new(struct {
		n atomic.Int64
		_ [56]byte
	}).n
}
