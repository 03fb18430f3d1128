package memory

import (
	"time"

	"github.com/tollgate-go/tollgate/core/storekit"
)

// idleLocked reports whether every rule of tn, whose main bucket's TAT is
// tat, is idle at t (wall, for quotas); dropping it changes no decision.
// tn.mu is held.
func (tn *tenant) idleLocked(tat, t, wall int64) bool {
	if tat > t {
		return false
	}
	if tn.others != nil {
		for i := range *tn.others {
			if !(*tn.others)[i].idle(t, wall) {
				return false
			}
		}
	}
	return true
}

// pruneLocked drops the expired leases of tn's in-flight caps at t, so
// that a tenant whose requests in flight have all ended or expired is
// idle. tn.mu is held.
func (tn *tenant) pruneLocked(t int64) {
	if tn.others == nil {
		return
	}
	for i := range *tn.others {
		(*tn.others)[i].prune(t)
	}
}

// Eviction ranks tenants by the share of their most spent rule, in classes
// of a fortieth: a bucket one token short of a burst of 20 is in class 2,
// an empty one in class 40, one with reservations beyond may go higher.
// Tenants in protectedClass and up, two fifths spent or more, are evicted
// only when their shard holds no other; so is a tenant with a request in
// flight, whose eviction would let more requests run than its cap.
const (
	classesPerLimit = 40
	numClasses      = 64
	protectedClass  = 16
)

func shareClass(spent, size int64) int {
	if spent <= 0 || size <= 0 {
		return 0
	}
	return int(min(spent, 2*size) * classesPerLimit / size)
}

// classLocked returns tn's eviction class at t (wall, for quotas). tn.mu is
// held.
func (tn *tenant) classLocked(tat, t, wall int64) int {
	c := shareClass(tat-t, tn.tol.Load())
	if tn.others != nil {
		for i := range *tn.others {
			r := &(*tn.others)[i]
			switch {
			case r.kind == storekit.Bucket:
				c = max(c, shareClass(r.tat-t, r.size))
			case r.kind == storekit.InFlight:
				if n := r.inFlight(); n > 0 {
					c = max(c, protectedClass, shareClass(n, r.size))
				}
			case r.end > wall:
				c = max(c, shareClass(r.used, r.size))
			}
		}
	}
	return min(c, numClasses-1)
}

// killIdle marks tn dead if every rule of it is idle at t (wall, for
// quotas), and returns whether it did and, if not, tn's eviction class.
// sh.mu is held: the caller takes tn out of sh.
func killIdle(tn *tenant, t, wall int64) (killed bool, class int) {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	tn.pruneLocked(t)
	tat := tn.tat.Load()
	// The compare-and-swap fails if a Take landed since the load.
	if tn.idleLocked(tat, t, wall) && tn.tat.CompareAndSwap(tat, deadTAT) {
		return true, 0
	}
	return false, tn.classLocked(tn.tat.Load(), t, wall)
}

// killUpTo marks tn dead if its eviction class is at most limit, and
// returns its class and whether it did. sh.mu is held.
func killUpTo(tn *tenant, limit int, t, wall int64) (int, bool) {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	tat := tn.tat.Load()
	c := tn.classLocked(tat, t, wall)
	// A Take that lands meanwhile only raises the class, or makes the
	// compare-and-swap fail.
	return c, c <= limit && tn.tat.CompareAndSwap(tat, deadTAT)
}

// now returns the current time for the sweeper and for making room: in the
// Store's microseconds, and in Unix microseconds for quotas.
func (tb *table) now() (t, wall int64) {
	now := tb.clock.wallNow()
	return tb.clock.at(now), now.UnixMicro()
}

// sweep drops every tenant whose rules are all idle and returns how many it
// dropped. It changes no decision.
func (tb *table) sweep() int {
	t, wall := tb.now()
	dropped := 0
	for i := range tb.shards {
		sh := &tb.shards[i].shard
		sh.mu.Lock()
		sh.scan(0, func(tn *tenant) (bool, bool) {
			// Most tenants still being limited are skipped here,
			// without their lock.
			if tn.tat.Load() > t {
				return false, false
			}
			killed, _ := killIdle(tn, t, wall)
			if killed {
				dropped++
			}
			return killed, false
		})
		// A shard whose tenants have mostly gone gives back the
		// memory of their entries, and one with many tombstones drops
		// them.
		if p := sh.entries.Load(); p != nil && len(*p) > 8 && (sh.n*8 < len(*p) || (sh.used-sh.n)*4 > len(*p)) {
			sh.rebuild(sh.n)
		}
		sh.mu.Unlock()
	}
	return dropped
}

// sweepEvery sweeps every d until stop is closed.
func (tb *table) sweepEvery(d time.Duration, stop <-chan struct{}) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			tb.sweep()
		}
	}
}

// reclaim makes room in sh, which is at its cap; sh.mu is held. It drops
// the idle tenants; if that frees less than an eighth of the shard, it
// evicts tenants by class, least spent first, up to that eighth,
// protected ones only if nothing else is left. It frees at least one
// place.
func (tb *table) reclaim(sh *shard) {
	t, wall := tb.now()
	want := max(1, sh.cap/8)
	var classes [numClasses]int
	dropped := 0
	sh.scan(0, func(tn *tenant) (bool, bool) {
		killed, c := killIdle(tn, t, wall)
		if killed {
			dropped++
		} else {
			classes[c]++
		}
		return killed, false
	})
	n := want - dropped
	if n <= 0 {
		return
	}
	unprotected := 0
	for _, c := range classes[:protectedClass] {
		unprotected += c
	}
	if unprotected > 0 {
		n = min(n, unprotected)
	}
	// Evict every tenant below class last, and atLast of class last.
	last, atLast := numClasses-1, n
	for c, count := range classes {
		if count >= atLast {
			last = c
			break
		}
		atLast -= count
	}
	evicted, drained := 0, 0
	evict := func(tn *tenant, limit int) (drop, stop bool) {
		c, killed := killUpTo(tn, limit, t, wall)
		if killed {
			evicted++
			if c >= protectedClass {
				drained++
			}
			if c == last {
				atLast--
			}
		}
		return killed, evicted == n
	}
	// Each pass takes up where the last one stopped, as a clock hand
	// does: passes that all began at the first entry would leave their
	// tombstones at the front of the table and crowd the new tenants
	// into the rest, where probes would grow hundreds of entries long.
	sh.hand = sh.scan(sh.hand, func(tn *tenant) (bool, bool) {
		if atLast > 0 {
			return evict(tn, last)
		}
		return evict(tn, last-1)
	})
	// Every candidate was taken from meanwhile: evict whichever comes
	// first, so that the cap holds.
	for evicted == 0 && dropped == 0 {
		sh.hand = sh.scan(sh.hand, func(tn *tenant) (bool, bool) { return evict(tn, numClasses) })
	}
	tb.evictions.Add(uint64(evicted))
	tb.drained.Add(uint64(drained))
}
