package memory

import (
	"time"

	"github.com/tollgate-go/tollgate/core/storekit"
)

// An opState is an Op's working copy of one rule's state: the Op decides
// on copies and writes them back only once it is sure to stand.
type opState struct {
	ruleState
	from    int // where the state came from: mainState, newState, or its index in tenant.others
	changed bool

	// In flight: the leases live after the Op, and what the Op does to
	// its Lease, which commit writes.
	held  int64
	lease leaseChange
}

// A leaseChange is what an Op does to its Lease in an in-flight cap.
type leaseChange uint8

const (
	leaseKept leaseChange = iota
	leaseAdded
	leaseMoved // renewed, or taken again under the same name
	leaseDropped
	leaseNone // a slot taken without a lease
)

const (
	mainState = -1
	newState  = -2
)

// inlineRules is how many rules an Op may have before its working copies
// need an allocation; plans rarely have more.
const inlineRules = 8

// doRules applies op, of any kind but Check, to the rules of its tenant,
// as the reference model does. It holds the tenant's lock, so that no
// other Op changes the tenant's other rules meanwhile; a lock-free Take of
// the main bucket may still land, which the compare-and-swap of the main
// bucket's TAT detects: the Op then decides again.
func (tb *table) doRules(op *storekit.Op) {
	t, now := tb.clock.opTime(op.Now)
	var k lookup
	tb.lookup(op.Tenant, &k)
	if op.Kind == storekit.Reset {
		tb.reset(&k)
	}
	for {
		tn := k.find()
		if tn == nil && op.Kind == storekit.Take {
			tn = tb.insert(&k)
		}
		if tn != nil {
			tn.mu.Lock()
			if tn.tat.Load() == deadTAT {
				tn.mu.Unlock()
				continue
			}
		}
		done := apply(tn, op, t, now)
		if tn != nil {
			tn.mu.Unlock()
		}
		if done {
			return
		}
	}
}

// doLeases applies a Release or a Renew of in-flight caps alone, as the
// Limiter makes them for every request that holds a slot: under the
// tenant's lock, it changes the lease in place, without the working copies
// of doRules, as the reference model does.
func (tb *table) doLeases(op *storekit.Op) {
	t := tb.clock.bucketTime(op.Now)
	var k lookup
	looked := false
	tn := slotTenant(op)
	op.Results = op.Results[:0]
	op.Allowed, op.Delay = false, 0
	for {
		if tn == nil {
			if !looked {
				tb.lookup(op.Tenant, &k)
				looked = true
			}
			tn = k.find()
		}
		if tn != nil {
			tn.mu.Lock()
			if tn.tat.Load() == deadTAT {
				tn.mu.Unlock()
				tn = nil
				continue
			}
		}
		for i := range op.Rules {
			r := &op.Rules[i]
			held := int64(0)
			if s := tn.inFlight(r.Name); s != nil {
				s.prune(t)
				if _, live := s.leases[op.Lease]; live {
					if op.Kind == storekit.Release {
						delete(s.leases, op.Lease)
					} else {
						s.setLease(op.Lease, t+op.LeaseTTL.Microseconds())
					}
				}
				held = s.inFlight()
			}
			op.Results = append(op.Results, storekit.Result{Allowed: held < r.Burst, Remaining: max(r.Burst-held, 0)})
		}
		if tn != nil {
			tn.mu.Unlock()
		}
		return
	}
}

// slotTenant returns the tenant that op's Slot names, set by the Take that
// granted op's Lease, or nil if it names none of this Store's. The tenant
// may have been dropped since: the caller checks.
func slotTenant(op *storekit.Op) *tenant {
	tn, _ := op.Slot.(*tenant)
	if tn == nil || len(op.Tenant) > maxKeyLen || tn.id != op.Tenant {
		return nil
	}
	return tn
}

// inFlight returns the state of tn's in-flight cap called name, or nil (tn
// may be nil). tn.mu is held.
func (tn *tenant) inFlight(name string) *ruleState {
	if tn == nil || tn.others == nil {
		return nil
	}
	others := *tn.others
	for i := range others {
		if o := &others[i]; o.kind == storekit.InFlight && o.name == name {
			return o
		}
	}
	return nil
}

// A workingSet is an Op's copies of the states of its rules: the state of
// rule i is states[index[i]], one copy for rules that name the same state.
type workingSet struct {
	states []opState
	index  []int
}

func (w *workingSet) of(i int) *opState { return &w.states[w.index[i]] }

// apply decides op on tn (nil for a tenant the Store does not hold) at t,
// as the reference model does, and writes the states back. It reports
// false, having written nothing, if a lock-free Take moved the main bucket
// since apply read it. tn.mu is held.
func apply(tn *tenant, op *storekit.Op, t int64, now time.Time) bool {
	wall := now.UnixMicro()
	mainTAT := int64(fullTAT)
	if tn != nil {
		mainTAT = tn.tat.Load()
	}
	var inline [inlineRules]opState
	var inlineIndex [inlineRules]int
	states, index := inline[:0], inlineIndex[:0]
	if len(op.Rules) > inlineRules {
		states, index = make([]opState, 0, len(op.Rules)), make([]int, 0, len(op.Rules))
	}
	w := loadStates(states, index, tn, op.Rules, mainTAT, t, now, wall)
	w.endLease(op)

	cost := max(op.Cost, 1)
	if op.Kind == storekit.Cancel && t < op.Mark {
		w.giveBack(op.Rules, cost, t)
	}
	maxDelay := int64(0)
	if op.Kind == storekit.Take {
		maxDelay = max(op.MaxDelay, 0).Microseconds()
	}
	allowed, delay := w.decide(op.Rules, cost, maxDelay, t)
	granted := op.Kind == storekit.Take && allowed
	op.Results = op.Results[:0]
	for i := range op.Rules {
		op.Results = append(op.Results, w.settle(i, &op.Rules[i], op, cost, t, now, granted))
	}
	if tn != nil && !commit(tn, w.states, mainTAT, t, wall, op.Lease, t+op.LeaseTTL.Microseconds()) {
		return false
	}
	op.Allowed, op.Delay = false, 0
	if op.Kind == storekit.Take || op.Kind == storekit.Inspect {
		op.Allowed = allowed
		if allowed {
			op.Delay = usec(delay)
		}
	}
	if granted {
		op.Mark = t + delay
		switch {
		case unleased(op):
			op.Slot = w.held()
		case op.Lease != "":
			op.Slot = tn
		}
	}
	return true
}

// held returns the Held of the slots that w's Op took without a lease, or
// nil if it took none, once commit has counted them.
func (w *workingSet) held() storekit.Held {
	counters := make([]*capSlots, 0, inlineRules)
	for i := range w.states {
		if s := &w.states[i]; s.lease == leaseNone {
			counters = append(counters, s.unleased)
		}
	}
	return heldOf(counters)
}

// unleased reports whether op takes its slots without a lease, as a
// Limiter does of an in-process store (see storekit.InProcess).
func unleased(op *storekit.Op) bool { return op.Lease == "" && op.LeaseTTL == 0 }

// loadStates copies the states of rules from tn into states and index,
// which it returns as a workingSet.
func loadStates(states []opState, index []int, tn *tenant, rules []storekit.Rule, mainTAT, t int64, now time.Time, wall int64) workingSet {
	for i := range rules {
		r := &rules[i]
		j := 0
		for j < i && (rules[j].Name != r.Name || rules[j].Kind != r.Kind) {
			j++
		}
		if j < i {
			index = append(index, index[j])
			continue
		}
		index = append(index, len(states))
		states = append(states, opState{})
		load(&states[len(states)-1], tn, r, mainTAT, t, now, wall)
	}
	return workingSet{states, index}
}

// endLease applies a Release, a Cancel or a Renew to the Op's Lease in
// its in-flight caps: a Release or a Cancel gives the slot back, a Renew
// moves a live lease's expiry.
func (w *workingSet) endLease(op *storekit.Op) {
	var change leaseChange
	switch op.Kind {
	case storekit.Release, storekit.Cancel:
		change = leaseDropped
	case storekit.Renew:
		change = leaseMoved
	default:
		return
	}
	if unleased(op) {
		return // a Limiter gives such slots back through their Held
	}
	for i := range w.states {
		s := &w.states[i]
		if s.kind != storekit.InFlight {
			continue
		}
		if _, live := s.leases[op.Lease]; live {
			s.lease, s.changed = change, true
			if change == leaseDropped {
				s.held--
			}
		}
	}
}

// giveBack gives back what a reservation of cost took from rules, which
// has not come due at t.
func (w *workingSet) giveBack(rules []storekit.Rule, cost, t int64) {
	for i := range rules {
		r, s := &rules[i], w.of(i)
		switch r.Kind {
		case storekit.Quota:
			s.used = max(s.used-cost, 0)
		case storekit.Bucket:
			s.tat = max(s.tat-cost*r.Interval, t)
		default:
			continue
		}
		s.changed = true
	}
}

// decide reports whether every rule allows a request of cost at t, its
// buckets within maxDelay, and how long the request must wait for its
// slowest bucket.
func (w *workingSet) decide(rules []storekit.Rule, cost, maxDelay, t int64) (allowed bool, delay int64) {
	allowed = true
	for i := range rules {
		r, s := &rules[i], w.of(i)
		switch r.Kind {
		case storekit.Quota:
			allowed = allowed && s.used+cost <= r.Burst
			continue
		case storekit.InFlight:
			allowed = allowed && s.held < r.Burst
			continue
		}
		if wait := bucketWait(s.tat, t, r, cost); wait > 0 {
			delay = max(delay, wait)
			allowed = allowed && wait <= maxDelay
		}
	}
	return allowed, delay
}

// settle takes a granted request of cost from rule i, r, and returns the
// rule's result. A granted request holds a slot of an in-flight cap
// whatever its cost.
func (w *workingSet) settle(i int, r *storekit.Rule, op *storekit.Op, cost, t int64, now time.Time, granted bool) storekit.Result {
	s := w.of(i)
	switch r.Kind {
	case storekit.Bucket:
		var res storekit.Result
		res, s.tat = bucketResult(s.tat, t, r, cost, granted)
		s.changed = s.changed || granted
		return res
	case storekit.InFlight:
		if granted && s.lease == leaseKept {
			// Rules that name one state share it: the lease is added
			// once.
			s.lease, s.changed = leaseAdded, true
			if unleased(op) {
				s.lease = leaseNone // commit counts it
				s.held++
			} else if _, live := s.leases[op.Lease]; live {
				s.lease = leaseMoved
			} else {
				s.held++
			}
		}
		return storekit.Result{Allowed: granted || s.held < r.Burst, Remaining: max(r.Burst-s.held, 0)}
	}
	if granted {
		// The count moves to the period the request falls in: a
		// tenant whose calendar changed keeps what it used.
		s.used += cost
		s.end = periodEnd(r, now)
		s.changed = true
	}
	return quotaResult(&s.ruleState, r, cost, now.UnixMicro(), granted)
}

// load sets s to a working copy of the state of tn's rule r (tn may be
// nil), a quota's count reset if its period has ended, an in-flight cap's
// expired leases dropped.
func load(s *opState, tn *tenant, r *storekit.Rule, mainTAT, t int64, now time.Time, wall int64) {
	s.ruleState = ruleState{name: r.Name, kind: r.Kind, tat: fullTAT}
	s.from = newState
	switch {
	case r.Kind == storekit.Bucket && r.Name == "":
		s.tat, s.from = mainTAT, mainState
	case tn != nil && tn.others != nil:
		others := *tn.others
		for i := range others {
			if o := &others[i]; o.name == r.Name && o.kind == r.Kind {
				s.ruleState, s.from = *o, i
				break
			}
		}
	}
	if r.Kind == storekit.Quota && s.end <= wall {
		s.used, s.end = 0, periodEnd(r, now)
	}
	switch r.Kind {
	case storekit.Quota:
		s.size = r.Burst
	case storekit.InFlight:
		s.size = r.Burst
		// Pruning changes the shared map at once, which is safe
		// whatever the Op decides: an expired lease is gone for every
		// later Op.
		s.changed = s.prune(t)
		s.held = s.inFlight()
	default:
		s.size = r.Tolerance()
	}
}

// commit writes the changed states back to tn: the main bucket first, by
// compare-and-swap from mainTAT, which fails if a lock-free Take moved it;
// then lease, in the in-flight caps, set to expire at expires or dropped;
// then the others, of which it keeps only those that are not idle. tn.mu
// is held.
func commit(tn *tenant, states []opState, mainTAT, t, wall int64, lease string, expires int64) bool {
	changed := false
	for i := range states {
		changed = changed || states[i].changed
	}
	if !changed {
		return true
	}
	for i := range states {
		if s := &states[i]; s.changed && s.from == mainState {
			if !tn.tat.CompareAndSwap(mainTAT, s.tat) {
				return false
			}
			tn.noteTolerance(s.size)
		}
	}
	for i := range states {
		switch s := &states[i]; s.lease {
		case leaseAdded, leaseMoved:
			s.setLease(lease, expires)
		case leaseNone:
			if s.unleased == nil {
				s.unleased = new(capSlots)
			}
			s.unleased.n.Add(1)
		case leaseDropped:
			delete(s.leases, lease)
		}
	}
	var others []ruleState
	if tn.others != nil {
		others = *tn.others
	}
	for i := range states {
		switch s := &states[i]; {
		case !s.changed || s.from == mainState:
		case s.from == newState:
			others = append(others, s.ruleState)
		default:
			others[s.from] = s.ruleState
		}
	}
	kept := others[:0]
	for i := range others {
		// An in-flight cap stays, empty, while the tenant does: its
		// requests come and go, and its map serves them all.
		if o := &others[i]; !o.idle(t, wall) || o.kind == storekit.InFlight {
			if len(kept) != i {
				kept = append(kept, *o)
			} else {
				kept = kept[:i+1]
			}
		}
	}
	switch {
	case len(kept) == 0:
		tn.others = nil
	case tn.others == nil:
		tn.others = new([]ruleState)
		fallthrough
	default:
		*tn.others = kept
	}
	return true
}

// quotaResult returns the result of a request of cost on the quota state s
// of rule r, at wall.
func quotaResult(s *ruleState, r *storekit.Rule, cost, wall int64, granted bool) storekit.Result {
	left := usec(s.end - wall)
	over := s.used+cost > r.Burst
	res := storekit.Result{Allowed: granted || !over, Remaining: max(r.Burst-s.used, 0)}
	if !granted && over {
		res.RetryAfter = left
	}
	if s.used > 0 {
		res.ResetAfter = left
	}
	return res
}

// periodEnd returns the end of the period of quota r that holds now, in
// Unix microseconds.
func periodEnd(r *storekit.Rule, now time.Time) int64 {
	_, end := r.Period(now)
	return end.UnixMicro()
}
