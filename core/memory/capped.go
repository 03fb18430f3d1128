package memory

import (
	"slices"
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
	if granted {
		tn.noteTolerance(bucket.Tolerance())
		delay := max(wait, 0)
		op.Delay, op.Mark = usec(delay), t+delay
	}
	counters := make([]*capSlots, 0, inlineRules)
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
					s.unleased = new(capSlots)
				}
				s.unleased.n.Add(1)
				counters = append(counters, s.unleased)
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
	switch {
	case !granted:
	case noLease:
		op.Slot = heldOf(counters)
	default:
		op.Slot = tn
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

// A capSlots counts the slots of a tenant's in-flight cap held without a
// lease. Takes add to it under the tenant's lock; Release takes one back
// without it, which only frees room, so no decision in progress can be
// wrong about it. It is the storekit.Held of a Take of one cap, and sits
// on a cache line of its own, so that the counts of tenants served on
// different cores do not slow each other.
type capSlots struct {
	n atomic.Int64
	_ [56]byte
}

// Release gives back one slot.
func (c *capSlots) Release() { c.n.Add(-1) }

// manyCaps is the storekit.Held of a Take of several caps.
type manyCaps []*capSlots

// Release gives back one slot of each cap.
func (m manyCaps) Release() {
	for _, c := range m {
		c.Release()
	}
}

// heldOf returns the Held of slots counted in counters, or nil if there
// are none.
func heldOf(counters []*capSlots) storekit.Held {
	switch len(counters) {
	case 0:
		return nil
	case 1:
		return counters[0]
	}
	return manyCaps(slices.Clone(counters))
}
