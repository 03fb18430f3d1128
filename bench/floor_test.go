package bench

import (
	"hash/maphash"
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
}
