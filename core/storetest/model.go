package storetest

import (
	"time"

	"github.com/tollgate-go/tollgate/core/storekit"
)

// A Model is the reference store that the kit compares stores with: the
// meaning of every storekit.Kind, written for clarity rather than speed, in
// integer microseconds on the time it is given. A store must make the
// decisions and report the figures that Model does for the same Ops at the
// same times (its Marks may differ: they mean something only to the store
// that made them).
//
// The rules:
//
//   - A token bucket is GCRA: its state is its theoretical arrival time
//     (TAT); a request needs Cost x Interval, and the bucket tolerates
//     Burst x Interval ahead of now. A missing bucket is a full one. With
//     MaxDelay, a bucket that is short may grant a request that must wait
//     up to MaxDelay: its TAT moves by the need all the same, and the Op's
//     Delay is the longest wait of its buckets.
//   - A quota's state is the tokens used and when the period they count in
//     ends; once that end has passed, nothing is used. A granted request
//     adds its cost and moves the end to that of the period of
//     Rule.Period(now), so usage carries over when a tenant's calendar
//     changes. Quotas never reserve.
//   - Take grants when every rule allows, and then takes from every rule;
//     a denied Take takes nothing. Results hold each rule's state after a
//     granted Take; otherwise (denied, Inspect, Cancel, Reset) the state as
//     it stands, with Allowed and RetryAfter saying whether and when that
//     rule alone allows the request (a quota: when its period ends).
//   - Inspect decides as Take would and takes nothing.
//   - Reset forgets every rule of the tenant, named in the Op or not.
//   - Cancel, given the Mark of a granted Take that waited (when it
//     proceeds), does nothing once that time has come; otherwise each
//     bucket gets back the request's need (its TAT never before now) and
//     each quota still in its period its cost. So when every waiter of a
//     tenant gives up, in any order, the tenant owes nothing for them.
//   - An InFlight rule's state is its live leases. A Take passes it if
//     fewer than Burst are live, and a granted one adds the Op's Lease,
//     expiring LeaseTTL from now. Release and Cancel remove the Lease;
//     Renew moves a live one's expiry to LeaseTTL from now. Reset keeps
//     leases: they count requests that still run.
//
// The zero Model is empty and ready to use. A Model is not safe for
// concurrent use.
type Model struct {
	tenants map[string]map[string]*modelState

	journal storekit.Journal // overrides and the change log
}

type modelState struct {
	tat       int64            // bucket: µs since the Unix epoch
	used, end int64            // quota: tokens used in the period ending at end
	leases    map[string]int64 // in flight: when each lease expires
}

// Do runs op at now, as a store would, and fills in its results.
func (m *Model) Do(op *storekit.Op, now time.Time) {
	if m.tenants == nil {
		m.tenants = make(map[string]map[string]*modelState)
	}
	t := now.UnixMicro()
	cost := max(op.Cost, 1)
	op.Results = op.Results[:0]
	op.Allowed, op.Delay = false, 0
	switch op.Kind {
	case storekit.Check:
		return
	case storekit.SaveOverride, storekit.LoadOverrides:
		m.journal.Do(op)
		return
	case storekit.Reset:
		// Leases count requests that still run: a reset keeps them, and
		// only them, whatever else of the name's state there is.
		for name, s := range m.tenants[op.Tenant] {
			if len(s.leases) == 0 {
				delete(m.tenants[op.Tenant], name)
			} else {
				*s = modelState{leases: s.leases}
			}
		}
		m.journal.Do(op)
	}
	states := m.tenants[op.Tenant]
	if states == nil {
		states = make(map[string]*modelState)
		m.tenants[op.Tenant] = states
	}
	state := func(r *storekit.Rule) *modelState {
		s := states[r.Name]
		if s == nil {
			s = &modelState{leases: map[string]int64{}}
			states[r.Name] = s
		}
		if r.Kind == storekit.Quota && s.end <= t {
			s.used, s.end = 0, periodEnd(r, now)
		}
		for lease, expires := range s.leases {
			if expires <= t {
				delete(s.leases, lease)
			}
		}
		return s
	}
	for i := range op.Rules {
		r := &op.Rules[i]
		if r.Kind != storekit.InFlight {
			continue
		}
		switch s := state(r); op.Kind {
		case storekit.Release, storekit.Cancel:
			delete(s.leases, op.Lease)
		case storekit.Renew:
			if _, live := s.leases[op.Lease]; live {
				s.leases[op.Lease] = t + op.LeaseTTL.Microseconds()
			}
		}
	}
	if op.Kind == storekit.Cancel && t < op.Mark {
		for i := range op.Rules {
			r := &op.Rules[i]
			s := state(r)
			switch r.Kind {
			case storekit.Quota:
				s.used = max(s.used-cost, 0)
			case storekit.Bucket:
				s.tat = max(s.tat-cost*r.Interval, t)
			}
		}
	}
	maxDelay := int64(0)
	if op.Kind == storekit.Take {
		maxDelay = max(op.MaxDelay, 0).Microseconds()
	}
	allowed, delay := true, int64(0)
	for i := range op.Rules {
		r := &op.Rules[i]
		s := state(r)
		switch r.Kind {
		case storekit.Quota:
			allowed = allowed && s.used+cost <= r.Burst
			continue
		case storekit.InFlight:
			allowed = allowed && int64(len(s.leases)) < r.Burst
			continue
		}
		if wait := max(s.tat-t, 0) + cost*r.Interval - r.Tolerance(); wait > 0 {
			delay = max(delay, wait)
			allowed = allowed && wait <= maxDelay
		}
	}
	granted := op.Kind == storekit.Take && allowed
	for i := range op.Rules {
		r := &op.Rules[i]
		s := state(r)
		var res storekit.Result
		switch r.Kind {
		case storekit.InFlight:
			if granted {
				s.leases[op.Lease] = t + op.LeaseTTL.Microseconds()
			}
			held := int64(len(s.leases))
			res = storekit.Result{Allowed: granted || held < r.Burst, Remaining: max(r.Burst-held, 0)}
		case storekit.Quota:
			if granted {
				s.used += cost
				s.end = periodEnd(r, now)
			}
			left := usec(s.end - t)
			over := s.used+cost > r.Burst
			res = storekit.Result{Allowed: granted || !over, Remaining: max(r.Burst-s.used, 0)}
			if !granted && over {
				res.RetryAfter = left
			}
			if s.used > 0 {
				res.ResetAfter = left
			}
		default:
			rel := max(s.tat-t, 0)
			need, tol := cost*r.Interval, r.Tolerance()
			if granted {
				rel += need
				s.tat = t + rel
				res = storekit.Result{Allowed: true, Remaining: max(tol-rel, 0) / r.Interval, ResetAfter: usec(rel)}
			} else {
				wait := rel + need - tol
				res = storekit.Result{Allowed: wait <= 0, Remaining: max(tol-rel, 0) / r.Interval,
					RetryAfter: usec(max(wait, 0)), ResetAfter: usec(rel)}
			}
		}
		op.Results = append(op.Results, res)
	}
	if op.Kind == storekit.Take || op.Kind == storekit.Inspect {
		op.Allowed = allowed
		if allowed {
			op.Delay = usec(delay)
		}
	}
	if granted {
		op.Mark = t + delay
	}
}

func periodEnd(r *storekit.Rule, now time.Time) int64 {
	_, end := r.Period(now)
	return end.UnixMicro()
}

func usec(n int64) time.Duration { return time.Duration(n) * time.Microsecond }
