package bench

import (
	"hash/maphash"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkDecisionFloor times, on the machine it runs on, the three steps
// that no in-process decision of a shared bucket can skip, each alone and
// the three in a row: a read of the clock (time.Since, the cheapest read
// package time offers), the hash of a tenant ID (hash/maphash), and a
// compare-and-swap of the bucket's state. Set beside BenchmarkMemory's
// hotkey-serial case, it tells how much of a decision is the rest: the
// lookup, the arithmetic and the result. go-limiter reads the clock with
// both its wall and monotonic readings (package time's now, reached by a
// linkname directive), hashes the key into a map under a read lock, and
// takes the bucket's lock.
//
// step=bare is a whole decision with nothing but those steps: a one-bucket
// GCRA take from a table of one tenant found at its first probe, with the
// remaining tokens and the times of the result, called through a function
// value as BenchmarkMemory calls every library. It tells how close to the
// floor a store can come before it holds more than one tenant.
//
// Run it in a process of its own, not beside BenchmarkMemory: on some
// machines go-limiter's hot key, timed after it in the same process, ran
// slower in some processes and not in others.
func BenchmarkDecisionFloor(b *testing.B) {
	origin := time.Now()
	seed := maphash.MakeSeed()
	id := "tenant-0"
	var state atomic.Int64
	var sink int64 // the closures' results go here, so that none is optimised away
	b.Run("step=clock", func(b *testing.B) {
		for b.Loop() {
			sink += int64(time.Since(origin) / time.Microsecond)
		}
	})
	b.Run("step=hash", func(b *testing.B) {
		for b.Loop() {
			sink += int64(maphash.String(seed, id))
		}
	})
	b.Run("step=cas", func(b *testing.B) {
		for b.Loop() {
			old := state.Load()
			state.CompareAndSwap(old, old+1)
		}
	})
	b.Run("step=all", func(b *testing.B) {
		for b.Loop() {
			t := int64(time.Since(origin) / time.Microsecond)
			sink += int64(maphash.String(seed, id) & 1)
			old := state.Load()
			state.CompareAndSwap(old, max(old, t)+1)
		}
	})
	b.Run("step=bare", func(b *testing.B) {
		tb := newBareTable(id)
		take := func(key string) bool { return tb.take(key, 10_000, 1e9, 1).allowed }
		key := strings.Clone(id) // a copy, as BenchmarkMemory's keys are
		denied := 0
		for b.Loop() {
			if !take(key) {
				denied++
			}
		}
		if denied > 0 {
			b.Fatalf("%d requests denied, want none", denied)
		}
	})
}

// A bareTable is the least a store of GCRA buckets needs: an open-addressing
// table of tenants, found without a lock, each bucket one word changed by
// compare-and-swap, time in microseconds since an origin.
type bareTable struct {
	origin  time.Time
	seed    maphash.Seed
	entries []bareEntry // a power of two long
}

type bareEntry struct {
	hash atomic.Uint64
	tn   atomic.Pointer[bareTenant]
}

type bareTenant struct {
	tat atomic.Int64
	id  string
}

type bareResult struct {
	allowed          bool
	remaining        int64
	retryIn, resetIn time.Duration
}

// newBareTable returns a table that holds id, with a full bucket.
func newBareTable(id string) *bareTable {
	tb := &bareTable{origin: time.Now(), seed: maphash.MakeSeed(), entries: make([]bareEntry, 64)}
	h := maphash.String(tb.seed, id)
	tn := &bareTenant{id: strings.Clone(id)}
	tn.tat.Store(math.MinInt64 / 2)
	e := &tb.entries[h>>16&uint64(len(tb.entries)-1)]
	e.hash.Store(h)
	e.tn.Store(tn)
	return tb
}

// take takes cost tokens from id's bucket of burst tokens, one every
// interval microseconds. An ID the table does not hold is denied.
func (tb *bareTable) take(id string, interval, burst, cost int64) bareResult {
	t := int64(time.Since(tb.origin) / time.Microsecond)
	h := maphash.String(tb.seed, id)
	mask := uint64(len(tb.entries) - 1)
	var tn *bareTenant
	for i, step := h>>16&mask, uint64(1); ; i, step = (i+step)&mask, step+1 {
		e := &tb.entries[i]
		p := e.tn.Load()
		if p == nil {
			return bareResult{}
		}
		if e.hash.Load() == h && p.id == id {
			tn = p
			break
		}
	}
	tol, need := burst*interval, cost*interval
	for {
		tat := tn.tat.Load()
		ahead := max(tat-t, 0)
		if ahead+need > tol {
			return bareResult{remaining: max(tol-ahead, 0) / interval, retryIn: time.Duration(ahead+need-tol) * time.Microsecond}
		}
		if tn.tat.CompareAndSwap(tat, t+ahead+need) {
			ahead += need
			return bareResult{allowed: true, remaining: (tol - ahead) / interval, resetIn: time.Duration(ahead) * time.Microsecond}
		}
	}
}
