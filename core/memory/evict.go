package memory

// Eviction ranks buckets by the share of their burst that is spent at the
// time of the eviction, in classes of 1/classesPerBurst: a bucket one token
// short of a burst of 20 is in class 2, an empty one in class 40. Buckets
// with a request denied since their last allowed one rank above all others,
// by the same share.
const (
	classesPerBurst = 40
	shareClasses    = 64 // the last also holds every share above 63/40
	numClasses      = 2 * shareClasses

	// protectedClass and up are buckets estimated at two fifths spent or
	// more, or throttled. The estimate is low by less than a fifth, so
	// every bucket with half or more of its burst spent is among them.
	protectedClass = 16
)

// A quota's slot ranks by the share of its period's tokens used.
func classOf(m uint64, w, now int64) int {
	c := min(int(spentOf(m, w, now)*classesPerBurst), shareClasses-1)
	if w&throttledBit != 0 {
		c += shareClasses
	}
	return c
}

// reclaim makes room in a shard at its cap; sh.mu is held. It drops the
// buckets that are full at now (which changes no decision). If that frees
// less than an eighth of the cap, it evicts buckets, least spent first, up
// to that eighth; but it evicts a protected bucket only when the shard holds
// no other. It returns how many buckets it evicted and how many of those
// were protected. It frees at least one slot.
func (sh *shard) reclaim(now int64) (evicted, drained int) {
	t := sh.table.Load()
	want := max(1, sh.cap/8)
	var classes [numClasses]int
	dropped := 0
	for i := range t.slots {
		sl := &t.slots[i]
		m := sl.meta.Load()
		if m == 0 {
			continue
		}
		w := sl.word.Load()
		if w >= 0 && t.expired(m, w, now) {
			if sl.word.CompareAndSwap(w, deadWord) {
				dropped++
				continue
			}
			w = sl.word.Load() // a Take landed first: the bucket is not full
		}
		if w >= 0 {
			classes[classOf(m, w, now)]++
		}
	}
	sh.live -= dropped
	n := want - dropped
	if n <= 0 {
		return 0, 0
	}
	unprotected := 0
	for _, c := range classes[:protectedClass] {
		unprotected += c
	}
	if unprotected > 0 {
		n = min(n, unprotected)
	}
	// Evict every bucket below class last, and atLast of the count of
	// class last, spread evenly over the table: evicting those first in
	// slot order would leave the survivors bunched at the end of the
	// table, in long runs that every probe would have to walk.
	last, atLast := numClasses-1, n
	for c, count := range classes {
		if count >= atLast {
			last = c
			break
		}
		atLast -= count
	}
	spread := 0 // Bresenham's accumulator: atLast of every classes[last]
	for i := range t.slots {
		if evicted == n {
			break
		}
		sl := &t.slots[i]
		m := sl.meta.Load()
		if m == 0 {
			continue
		}
		w := sl.word.Load()
		if w < 0 {
			continue
		}
		c := classOf(m, w, now)
		if c == last {
			if spread += atLast; spread < classes[last] {
				continue
			}
			spread -= classes[last]
		}
		// Takes that land meanwhile only raise a bucket's class.
		for c <= last {
			if sl.word.CompareAndSwap(w, deadWord) {
				evicted++
				if c >= protectedClass {
					drained++
				}
				break
			}
			if w = sl.word.Load(); w < 0 {
				break
			}
			c = classOf(m, w, now)
		}
	}
	if evicted == 0 && dropped == 0 {
		// Every candidate was taken from meanwhile; evict whatever is
		// first, so that the cap holds.
		for i := range t.slots {
			sl := &t.slots[i]
			m := sl.meta.Load()
			if m == 0 {
				continue
			}
			if w := sl.word.Load(); w >= 0 && sl.word.CompareAndSwap(w, deadWord) {
				evicted++
				if classOf(m, w, now) >= protectedClass {
					drained++
				}
				break
			}
		}
	}
	sh.live -= evicted
	return evicted, drained
}
