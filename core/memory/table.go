package memory

import (
	"crypto/sha256"
	"hash/maphash"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// A table is an open-addressing hash table with linear probing. Readers
// search it without a lock; the shard's mutex serialises every writer that
// adds, drops or moves a slot. Slots are never reused within a table: a
// dropped slot stays in place, marked dead, until the next rebuild.
type table struct {
	slots []slot
}

// A slot is one bucket. meta is written last when a slot is filled, so a
// reader that sees a non-zero meta also sees data and tat.
type slot struct {
	tat  atomic.Int64   // theoretical arrival time in µs, or a marker below
	meta atomic.Uint64  // 0: empty; else tag<<32 | digest flag | length
	data unsafe.Pointer // the key's bytes, in the shard's arena; immutable
}

const (
	// deadTAT marks a dropped bucket; movedTAT one copied to a newer table.
	// Both are terminal for the slot, so compare-and-swap never sees ABA.
	deadTAT    = math.MinInt64
	movedTAT   = math.MinInt64 + 1
	lastMarker = movedTAT

	// Keys longer than maxInlineKey are stored as their SHA-256, which
	// bounds the memory of one key; a flag in meta keeps a digest from
	// ever equalling a short key of the same bytes.
	maxInlineKey = 64
	digestFlag   = 1 << 31

	minSlots = 8
)

// A key is a lookup key: the bytes stored for it and their hashes.
type key struct {
	stored string
	hash   uint64
	meta   uint64
}

func (b *buckets) makeKey(s string) key {
	flag := uint64(0)
	if len(s) > maxInlineKey {
		sum := sha256.Sum256(unsafe.Slice(unsafe.StringData(s), len(s)))
		s = string(sum[:])
		flag = digestFlag
	}
	h := maphash.String(b.seed, s)
	// The tag comes from other bits than the shard and the slot index do,
	// so that it still tells keys apart within one probe sequence.
	tag := uint32((h*0x9e3779b97f4a7c15)>>32) | 1
	return key{stored: s, hash: h, meta: uint64(tag)<<32 | flag | uint64(len(s))}
}

func newTable(n int) *table {
	return &table{slots: make([]slot, n)}
}

// home returns the first slot of h's probe sequence.
func (t *table) home(h uint64) int {
	return int((h >> 32) * uint64(len(t.slots)) >> 32)
}

// find returns the live slot of k, or nil. It takes no lock.
func (t *table) find(k key) *slot {
	n := len(t.slots)
	i := t.home(k.hash)
	for range n {
		sl := &t.slots[i]
		m := sl.meta.Load()
		if m == 0 {
			return nil
		}
		if m == k.meta && sl.key(m) == k.stored && sl.tat.Load() != deadTAT {
			return sl
		}
		if i++; i == n {
			i = 0
		}
	}
	return nil
}

func (sl *slot) key(meta uint64) string {
	return unsafe.String((*byte)(sl.data), int(meta&(digestFlag-1)))
}

// A shard is a table and the state of its writers. It is padded so that the
// writers of one shard do not slow the readers of its neighbours.
type shard struct {
	mu    sync.Mutex
	table atomic.Pointer[table]
	live  int    // slots holding a bucket; guarded by mu
	used  int    // slots filled since the table was built, live or dead; guarded by mu
	arena []byte // the chunk new keys are copied into; guarded by mu
	_     [64]byte
}

const maxChunk = 16 << 10

// takeLocked is the slow path of take: it looks again under the lock and adds
// the bucket if it is still missing.
func (sh *shard) takeLocked(b *buckets, k key, now int64, limit tollgate.Limit, cost int64) tollgate.Result {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.table.Load()
	if sl := t.find(k); sl != nil {
		// With the lock held no slot can be dropped or moved.
		r, _ := takeFrom(sl, now, limit, cost)
		return r
	}
	newTAT, r := tollgate.GCRA(now, now, limit, cost)
	if sh.live >= b.shardCap {
		sh.dropFull(now)
		if sh.live >= b.shardCap {
			b.evictions.Add(uint64(sh.evictOldest(b.shardCap)))
		}
	}
	if (sh.used+1)*4 > len(t.slots)*3 {
		t = sh.rebuild(b.seed, now)
	}
	sh.insert(t, k.stored, k.hash, k.meta, newTAT)
	return r
}

// insert fills the first empty slot of the probe sequence of h.
func (sh *shard) insert(t *table, stored string, h, meta uint64, tat int64) {
	n := len(t.slots)
	i := t.home(h)
	for t.slots[i].meta.Load() != 0 {
		if i++; i == n {
			i = 0
		}
	}
	sl := &t.slots[i]
	sl.data = sh.copyKey(stored)
	sl.tat.Store(tat)
	sl.meta.Store(meta)
	sh.live++
	sh.used++
}

// copyKey copies a key into the arena; many keys share one allocation.
func (sh *shard) copyKey(s string) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	if cap(sh.arena)-len(sh.arena) < len(s) {
		size := min(max(2*cap(sh.arena), 256), maxChunk)
		sh.arena = make([]byte, 0, size)
	}
	start := len(sh.arena)
	sh.arena = append(sh.arena, s...)
	return unsafe.Pointer(&sh.arena[start])
}

// dropFull marks dead every bucket that is full at now and returns how many.
func (sh *shard) dropFull(now int64) int {
	t := sh.table.Load()
	dropped := 0
	for i := range t.slots {
		sl := &t.slots[i]
		if sl.meta.Load() == 0 {
			continue
		}
		// A Take racing with this either lands first, and the bucket
		// is no longer full, or finds the slot dead and starts afresh
		// from the full bucket it was.
		if tat := sl.tat.Load(); tat > lastMarker && tat <= now && sl.tat.CompareAndSwap(tat, deadTAT) {
			dropped++
		}
	}
	sh.live -= dropped
	return dropped
}

// evictOldest drops about a sixteenth of the shard's buckets, those with the
// earliest arrival times: the closest to full, so the least is forgotten.
func (sh *shard) evictOldest(capacity int) int {
	t := sh.table.Load()
	tats := make([]int64, 0, sh.live)
	for i := range t.slots {
		if tat := t.slots[i].tat.Load(); t.slots[i].meta.Load() != 0 && tat > lastMarker {
			tats = append(tats, tat)
		}
	}
	if len(tats) == 0 {
		return 0
	}
	slices.Sort(tats)
	want := max(1, capacity/16)
	threshold := tats[min(want, len(tats))-1]
	evicted := 0
	for i := range t.slots {
		sl := &t.slots[i]
		if evicted == want || sl.meta.Load() == 0 {
			continue
		}
		for {
			tat := sl.tat.Load()
			if tat <= lastMarker || tat > threshold {
				break
			}
			if sl.tat.CompareAndSwap(tat, deadTAT) {
				evicted++
				break
			}
		}
	}
	sh.live -= evicted
	return evicted
}

// rebuild moves the live, not yet full buckets into a new table sized for
// them, with a fresh arena, and publishes it. Buckets full at now are left
// behind, which is also how growth sweeps.
func (sh *shard) rebuild(seed maphash.Seed, now int64) *table {
	old := sh.table.Load()
	next := newTable(max(minSlots, 2*(sh.live+1)))
	sh.arena = nil
	sh.live, sh.used = 0, 0
	for i := range old.slots {
		sl := &old.slots[i]
		m := sl.meta.Load()
		if m == 0 {
			continue
		}
		// Swapping in the marker hands the bucket over atomically: a
		// racing Take either lands before and is copied, or fails and
		// looks again in the new table under the lock.
		tat := sl.tat.Swap(movedTAT)
		if tat <= lastMarker || tat <= now {
			continue
		}
		stored := sl.key(m)
		sh.insert(next, stored, maphash.String(seed, stored), m, tat)
	}
	sh.table.Store(next)
	return next
}
