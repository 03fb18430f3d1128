package memory

import (
	"crypto/sha256"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"unsafe"
)

// A table is an open-addressing hash table with linear probing, and the
// arena that holds its keys' bytes. Readers search it without a lock; the
// shard's mutex serialises every writer that adds, drops or moves a slot.
// Slots are never reused within a table: a dropped slot stays in place,
// marked dead, until the next rebuild, which copies the live buckets and
// their keys into a new table.
//
// Slots hold no pointers, so the garbage collector does not scan them: a
// slot finds its key's bytes by their offset in the arena. The arena is one
// block, so that a reader goes from the slot to the key's bytes in one step;
// it grows by moving to a block twice the size, which readers of the old one
// do not mind, as bytes once written never change.
type table struct {
	slots []slot
	arena atomic.Pointer[byte] // the block of the keys' bytes
	buf   []byte               // the same block, filled up to its length; guarded by the shard's mutex
}

// A slot is one bucket. meta is written last when a slot is filled, so a
// reader that sees a non-zero meta also sees word and the key's bytes.
//
// meta holds, from the top bit down:
//
//	bits 63..40  tag: 24 bits of the key's hash, the lowest set; it also
//	             gives the slot's home, so rebuilding hashes nothing
//	bit  39      the stored bytes are the key's SHA-256 (a key longer
//	             than maxInlineKey), not the key
//	bits 38..32  the stored bytes' length, at most 64
//	bit  31      a rule of an Op other than a tenant's main bucket: the
//	             stored bytes are the rule's identity (ruleFlag, ops.go)
//	bit  30      that rule is a quota: the word counts its period's tokens
//	             (quotaFlag)
//	bits 29..28  zero
//	bits 27..0   the bytes' offset in the arena
type slot struct {
	word atomic.Int64 // the bucket's state (see gcra.go), or a marker
	meta atomic.Uint64
}

const (
	tagShift    = 40
	digestFlag  = 1 << 39
	lengthShift = 32
	lengthMask  = 1<<7 - 1
	refMask     = 1<<28 - 1 // an arena is at most 256 MiB

	// Keys longer than maxInlineKey are stored as their SHA-256, which
	// bounds the memory of one key; the flag keeps a digest from ever
	// equalling a short key of the same bytes.
	maxInlineKey = 64

	minSlots = 8
)

// A lookup is a key ready to look up: the bytes stored for it, its hash and
// the meta its slot holds (with a zero reference). Ops and the slow path of
// a Take compute one; the fast path of a Take keeps the same figures in
// registers (buckets.take).
type lookup struct {
	given  string    // the key as given, when it is stored as it is
	short  [2]uint64 // the first and last 8 bytes of a key of 8 to 16 bytes
	digest [32]byte  // its SHA-256 when it is longer than maxInlineKey
	hash   uint64
	meta   uint64
}

// memhash is the runtime's hash of byte strings, the one maps use (AES
// based where the CPU has it), without the wrappers of hash/maphash, which
// cost as much again as the hash of a short key. The runtime keeps this
// symbol open to packages outside the standard library (go.dev/issue/67401).
//
//go:noescape
//go:linkname memhash runtime.memhash
func memhash(p unsafe.Pointer, seed, length uintptr) uintptr

// set makes k the lookup of s under the hash seed, which is secret, so that
// clients cannot choose keys that land in one shard or one run of slots.
func (k *lookup) set(seed uintptr, s string) {
	flag := uint64(0)
	p := unsafe.Pointer(unsafe.StringData(s))
	n := len(s)
	if n > maxInlineKey {
		k.digest = sha256.Sum256(unsafe.Slice((*byte)(p), n))
		p, n = unsafe.Pointer(&k.digest), len(k.digest)
		flag = digestFlag
	} else {
		k.given = s
		if n >= 8 && n <= 16 {
			k.short[0] = binary.LittleEndian.Uint64(unsafe.Slice((*byte)(p), 8))
			k.short[1] = binary.LittleEndian.Uint64(unsafe.Slice((*byte)(unsafe.Add(p, n-8)), 8))
		}
	}
	k.hash = uint64(memhash(p, seed, uintptr(n)))
	k.meta = metaOf(k.hash, flag, n)
}

// metaOf returns the meta of the slot of stored bytes of length n, hash hash
// and flags flag, with a zero reference. The tag takes the hash's top bits;
// the shard takes its bottom ones.
func metaOf(hash, flag uint64, n int) uint64 {
	return (hash>>tagShift|1)<<tagShift | flag | uint64(n)<<lengthShift
}

// stored returns the bytes the table keeps for k. (A string into k.digest
// kept in k would make every lookup escape to the heap.)
func (k *lookup) stored() string {
	if k.meta&digestFlag != 0 {
		return unsafe.String(&k.digest[0], len(k.digest))
	}
	return k.given
}

// newTable returns a table of n slots whose arena holds arena bytes before
// it grows.
func newTable(n, arena int) *table {
	t := &table{slots: make([]slot, n)}
	if arena > 0 {
		t.buf = make([]byte, 0, arena)
		t.arena.Store(unsafe.SliceData(t.buf))
	}
	return t
}

// home returns the first slot of the probe sequence of a key with meta m.
func (t *table) home(m uint64) int {
	return int((m >> tagShift) * uint64(len(t.slots)) >> (64 - tagShift))
}

// find returns the live slot of k, or nil. It takes no lock.
func (t *table) find(k *lookup) *slot {
	n := len(t.slots)
	i := t.home(k.meta)
	for range n {
		sl := &t.slots[i]
		m := sl.meta.Load()
		if m == 0 {
			return nil
		}
		if m&^refMask == k.meta && t.holds(m, k) && sl.word.Load() != deadWord {
			return sl
		}
		if i++; i == n {
			i = 0
		}
	}
	return nil
}

// holds reports whether the slot whose meta is m, equal to k.meta but for
// the reference, holds k's bytes. Keys of 8 to 16 bytes, the usual tenant
// IDs, are compared as two words (overlapping for less than 16 bytes)
// rather than by a call.
func (t *table) holds(m uint64, k *lookup) bool {
	if n := m >> lengthShift & lengthMask; n-8 <= 8 {
		p := t.bytes(m)
		return binary.LittleEndian.Uint64(unsafe.Slice((*byte)(p), 8)) == k.short[0] &&
			binary.LittleEndian.Uint64(unsafe.Slice((*byte)(unsafe.Add(p, n-8)), 8)) == k.short[1]
	}
	return t.key(m) == k.stored()
}

// bytes returns the address of the stored bytes of the slot whose meta is m.
func (t *table) bytes(m uint64) unsafe.Pointer {
	return unsafe.Add(unsafe.Pointer(t.arena.Load()), m&refMask)
}

// key returns the stored bytes of the slot whose meta is m.
func (t *table) key(m uint64) string {
	n := int(m >> lengthShift & lengthMask)
	if n == 0 {
		return ""
	}
	return unsafe.String((*byte)(t.bytes(m)), n)
}

// insert fills the first empty slot of the probe sequence of a key with
// meta m (whose reference is ignored) and the stored bytes s; the shard's
// mutex is held.
func (t *table) insert(s string, m uint64, w int64) {
	n := len(t.slots)
	i := t.home(m)
	for t.slots[i].meta.Load() != 0 {
		if i++; i == n {
			i = 0
		}
	}
	sl := &t.slots[i]
	sl.word.Store(w)
	sl.meta.Store(m&^refMask | t.copyKey(s))
}

// copyKey copies s into the arena and returns its offset; the shard's
// mutex is held.
func (t *table) copyKey(s string) uint64 {
	if len(t.buf)+len(s) > cap(t.buf) {
		// Readers may be in the old block: the new one is published
		// before any slot that refers to bytes only it has.
		grown := make([]byte, len(t.buf), max(2*cap(t.buf), len(t.buf)+len(s), 256))
		copy(grown, t.buf)
		t.buf = grown
		t.arena.Store(unsafe.SliceData(t.buf))
	}
	off := uint64(len(t.buf))
	t.buf = append(t.buf, s...)
	return off
}

// A shard is the state of the writers of one table. The tables themselves
// sit apart, in one dense array that readers go through, while shards are
// padded so that the writers of one do not slow those of its neighbours.
type shard struct {
	mu    sync.Mutex
	table *atomic.Pointer[table] // its entry in buckets.tables
	cap   int                    // most buckets the shard may hold; immutable
	live  int                    // slots holding a bucket; guarded by mu
	used  int                    // slots filled since the table was built, live or dead; guarded by mu
	_     [64]byte
}

// add inserts a new bucket into t, the shard's table; mu is held.
func (sh *shard) add(t *table, s string, m uint64, w int64) {
	t.insert(s, m, w)
	sh.live++
	sh.used++
}

// dropFull marks dead every bucket that is full at now, and every quota
// whose period has ended, and returns how many.
func (sh *shard) dropFull(now int64) int {
	t := sh.table.Load()
	dropped := 0
	for i := range t.slots {
		sl := &t.slots[i]
		m := sl.meta.Load()
		if m == 0 {
			continue
		}
		// A Take racing with this either lands first, and the bucket
		// is no longer full, or finds the slot dead and starts afresh
		// from the full bucket it was.
		if w := sl.word.Load(); w >= 0 && t.expired(m, w, now) && sl.word.CompareAndSwap(w, deadWord) {
			dropped++
		}
	}
	sh.live -= dropped
	return dropped
}

// rebuild moves the live, not yet full buckets into a new table sized for
// them, with a fresh arena, and publishes it. Buckets full at now are left
// behind, which is also how growth sweeps.
func (sh *shard) rebuild(now int64) *table {
	old := sh.table.Load()
	// Room for the live keys and half as many again, about the inserts
	// until the next rebuild.
	bytes := 0
	for i := range old.slots {
		if m := old.slots[i].meta.Load(); m != 0 && old.slots[i].word.Load() >= 0 {
			bytes += int(m >> lengthShift & lengthMask)
		}
	}
	next := newTable(max(minSlots, 2*(sh.live+1)), bytes+bytes/2+256)
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
		w := sl.word.Swap(movedWord)
		if w < 0 || old.expired(m, w, now) {
			continue
		}
		sh.add(next, old.key(m), m, w)
	}
	sh.table.Store(next)
	return next
}
