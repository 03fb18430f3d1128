package memory

import (
	"crypto/sha256"
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/tollgate-go/tollgate/core/storekit"
)

// A table holds the Store's tenants in shards, each with a share of the
// key cap, so that making room at the cap is a pass over one shard, not
// over the whole Store. A tenant ID is hashed once, with a seed of the
// table's own: the hash picks the shard and the tenant's place in it.
//
// A shard is an open-addressing table of tenant pointers that requests
// read without a lock: a Go map would need a read lock, whose count the
// requests on several cores would pass from core to core on every
// request. Inserting and dropping tenants hold the shard's lock; a table
// that fills is rebuilt and replaced whole, so that a reader sees either
// table, never one being changed but for single entries. A dropped
// tenant's entry becomes a tombstone, which probes pass over, and its TAT
// becomes deadTAT, so that a request that found it just before looks
// again.
type table struct {
	seed      maphash.Seed
	hashMask  uint64 // all ones; tests narrow it to make IDs share hashes
	shards    []paddedShard
	mask      uint64
	clock     clock
	evictions atomic.Uint64
	drained   atomic.Uint64
}

type shard struct {
	mu      sync.Mutex              // guards writes to entries, n and used, and every tenant's deadTAT
	entries atomic.Pointer[[]entry] // nil until the first tenant; a power of two long
	n       int                     // tenants held
	used    int                     // entries that are not nil: tenants and tombstones
	cap     int
	hand    int // the entry where the next eviction pass starts (see reclaim)
}

// An entry of a shard holds a tenant and the hash of its ID, a
// tombstone, or nil: the end of a probe. The hash beside the pointer lets
// a probe pass the entries of other tenants without reading them, a cache
// miss each.
type entry struct {
	hash atomic.Uint64 // stored before tn
	tn   atomic.Pointer[tenant]
}

// set makes e hold tn, whose ID hashes to h.
func (e *entry) set(h uint64, tn *tenant) {
	e.hash.Store(h)
	e.tn.Store(tn)
}

// tombstone marks the entry of a dropped tenant.
var tombstone = new(tenant)

// paddedShard keeps each shard's lock on a cache line of its own, so that
// goroutines on different shards do not slow each other down.
type paddedShard struct {
	shard
	_ [64 - unsafe.Sizeof(shard{})%64]byte
}

// Shards hold at most shardKeys tenants at the cap, so that making room
// in one stays short, and at least minShardKeys, so that uneven hashing
// wastes little of the cap.
const (
	shardKeys    = 4096
	minShardKeys = 64
	maxShards    = 1024
)

func newTable(maxKeys int, c clock) *table {
	n := 1
	for n < maxShards && maxKeys/(2*n) >= minShardKeys && (n < 16 || maxKeys/n > shardKeys) {
		n *= 2
	}
	tb := &table{seed: maphash.MakeSeed(), hashMask: ^uint64(0), shards: make([]paddedShard, n), mask: uint64(n - 1), clock: c}
	for i := range tb.shards {
		sh := &tb.shards[i]
		// The caps add up to maxKeys exactly.
		sh.cap = maxKeys / n
		if i < maxKeys%n {
			sh.cap++
		}
	}
	return tb
}

// A tenant is the state of every rule of one tenant. Its main bucket
// (Rule.Name "", a Take's bucket) is one word that requests change by
// compare-and-swap without a lock; its other rules, rarer, are a slice
// that Ops change under the tenant's lock.
//
// A tenant fills one cache line, and a short ID is kept in it: a request
// that finds its tenant reads the ID and the TAT from memory once, where a
// copy of the ID elsewhere would be a second cache miss for every tenant
// of a large Store.
type tenant struct {
	tat    atomic.Int64     // the main bucket's TAT; deadTAT once dropped
	id     string           // the tenant's ID, as its shard keeps it (see lookup); in short if it fits
	short  [shortIDLen]byte // holds an ID of up to shortIDLen bytes
	tol    atomic.Int64     // the main bucket's tolerance when last taken from, to rank it for eviction
	mu     sync.Mutex       // guards others; held to drop the tenant
	others *[]ruleState     // nil when the tenant has no other rule in use
}

// shortIDLen is the longest ID a tenant keeps in itself: the room that is
// left of a cache line.
const shortIDLen = 16

// newTenant returns the tenant of k, with a full main bucket.
func newTenant(k *lookup) *tenant {
	tn := new(tenant)
	switch {
	case k.hashed:
		tn.id = string(k.digest[:])
	case len(k.id) <= len(tn.short):
		// A copy, as the caller's string may live in a buffer it reuses.
		tn.id = unsafe.String(&tn.short[0], copy(tn.short[:], k.id))
	default:
		tn.id = strings.Clone(k.id)
	}
	tn.tat.Store(fullTAT)
	return tn
}

// A ruleState is the state of one rule of a tenant other than its main
// bucket. Rules are told apart by name and kind, as the reference model's
// state of a name holds a bucket's TAT, a quota's count and the leases of
// requests in flight apart.
type ruleState struct {
	name string
	kind storekit.RuleKind
	size int64 // a bucket's tolerance, a quota's tokens, an in-flight cap: to rank the tenant for eviction
	tat  int64 // a bucket's TAT
	used int64 // a quota's tokens used in the period that ends at end
	end  int64 // in Unix microseconds of the wall clock

	// leases, for an in-flight cap, holds when each lease expires, in the
	// Store's microseconds; none expires before pruneAt. Ops change the
	// map in place, under the tenant's lock, once their decision stands.
	leases  map[string]int64
	pruneAt int64
	// unleased counts the slots held without a lease, a Limiter's, which
	// never expire (see storekit.InProcess); nil until the first.
	unleased *capSlots
}

// inFlight returns how many requests hold a slot of an in-flight cap.
func (r *ruleState) inFlight() int64 {
	n := int64(len(r.leases))
	if r.unleased != nil {
		n += r.unleased.n.Load()
	}
	return n
}

// idle reports whether the rule is in the state of a rule never used: a
// full bucket, a quota with nothing used in its period, an in-flight cap
// with no lease (expired ones count until pruned).
func (r *ruleState) idle(t, wall int64) bool {
	switch r.kind {
	case storekit.Quota:
		return r.used == 0 || r.end <= wall
	case storekit.InFlight:
		return r.inFlight() == 0
	}
	return r.tat <= t
}

// prune drops the leases expired at t, and reports whether it looked. It
// looks only once the earliest lease may have expired, so that an Op does
// not walk every lease of a tenant with many requests in flight.
func (r *ruleState) prune(t int64) bool {
	if len(r.leases) == 0 || t < r.pruneAt {
		return false
	}
	next := int64(math.MaxInt64)
	for lease, expires := range r.leases {
		if expires <= t {
			delete(r.leases, lease)
		} else {
			next = min(next, expires)
		}
	}
	r.pruneAt = next
	return true
}

// setLease adds or moves lease to expire at expires.
func (r *ruleState) setLease(lease string, expires int64) {
	if r.leases == nil {
		r.leases = make(map[string]int64)
	}
	if len(r.leases) == 0 || expires < r.pruneAt {
		r.pruneAt = expires
	}
	r.leases[lease] = expires
}

// noteTolerance records the main bucket's tolerance, for eviction.
func (tn *tenant) noteTolerance(tol int64) {
	// It seldom changes, and a load costs less than a store.
	if tn.tol.Load() != tol {
		tn.tol.Store(tol)
	}
}

// A lookup is a tenant ID as its shard keeps it, and its hash. An ID
// longer than maxKeyLen is kept as its SHA-256 digest, padded to
// hashedKeyLen bytes: a length that no ID kept as it is has, so that the
// two forms never meet, and a flood of long IDs takes no more memory than
// one of short ones.
type lookup struct {
	id     string // the ID, if kept as it is
	digest [hashedKeyLen]byte
	hashed bool
	h      uint64
	sh     *shard
}

const (
	maxKeyLen    = 64
	hashedKeyLen = maxKeyLen + 1
	maxTenantLen = 256 // the longest a Limiter accepts, hashed without an allocation
)

func (tb *table) lookup(tenant string, k *lookup) {
	if len(tenant) <= maxKeyLen {
		k.short(tb, tenant, tb.hash(tenant))
		return
	}
	k.hashed = true
	var sum [sha256.Size]byte
	if len(tenant) <= maxTenantLen {
		// A copy on the stack: the conversion of a long string
		// would allocate.
		var buf [maxTenantLen]byte
		sum = sha256.Sum256(buf[:copy(buf[:], tenant)])
	} else {
		sum = sha256.Sum256([]byte(tenant))
	}
	copy(k.digest[:], sum[:])
	k.h = maphash.Bytes(tb.seed, k.digest[:]) & tb.hashMask
	k.sh = &tb.shards[k.h&tb.mask].shard
}

// short is lookup of an ID of at most maxKeyLen bytes, kept as it is,
// whose hash is h. It and hash are small enough for Go to inline, which
// lookup is not.
func (k *lookup) short(tb *table, tenant string, h uint64) {
	k.id, k.h = tenant, h
	k.sh = &tb.shards[h&tb.mask].shard
}

// hash returns the hash of an ID as its shard keeps it.
func (tb *table) hash(id string) uint64 { return maphash.String(tb.seed, id) & tb.hashMask }

// is reports whether tn is k's tenant. The caller has compared hashes.
func (k *lookup) is(tn *tenant) bool {
	if k.hashed {
		return tn.id == string(k.digest[:])
	}
	return tn.id == k.id
}

// A probe is the order in which a tenant's entry is looked for in entries
// of a power-of-two length: from its home, steps of 1, 2, 3 and so on,
// which visit every entry once. Steps of one would let tenants pile up in
// long runs wherever evictions, which leave tombstones, have not been
// lately, and a probe that starts in a run walks it to its end.
type probe struct{ at, step, mask int }

// probeOf returns the probe of the hash h in entries of length n: its home
// is bits of h above those that picked the shard.
func probeOf(h uint64, n int) probe { return probe{at: int(h>>16) & (n - 1), mask: n - 1} }

func (p *probe) next() {
	p.step++
	p.at = (p.at + p.step) & p.mask
}

// find returns k's tenant, or nil, without a lock. The tenant may be
// dropped meanwhile: its TAT is then deadTAT.
func (k *lookup) find() *tenant {
	p := k.sh.entries.Load()
	if p == nil {
		return nil
	}
	es := *p
	for pr := probeOf(k.h, len(es)); ; pr.next() {
		e := &es[pr.at]
		tn := e.tn.Load()
		if tn == nil {
			return nil
		}
		if e.hash.Load() == k.h && tn != tombstone && k.is(tn) {
			return tn
		}
	}
}

// insert returns k's tenant, adding it to its shard if it is not there;
// at the shard's cap it makes room first.
func (tb *table) insert(k *lookup) *tenant {
	sh := k.sh
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if tn := k.find(); tn != nil {
		return tn
	}
	if sh.n >= sh.cap {
		tb.reclaim(sh)
	}
	tn := newTenant(k)
	p := sh.entries.Load()
	// Entries stay at most three quarters used, so that a probe is
	// short and always ends at a nil one.
	if p == nil || (sh.used+1)*4 > len(*p)*3 {
		p = sh.rebuild(sh.n)
	}
	es := *p
	pr := probeOf(k.h, len(es))
	for e := es[pr.at].tn.Load(); e != nil && e != tombstone; e = es[pr.at].tn.Load() {
		pr.next()
	}
	if es[pr.at].tn.Load() == nil {
		sh.used++
	}
	es[pr.at].set(k.h, tn)
	sh.n++
	return tn
}

// rebuild replaces sh's entries by new ones, without tombstones, with room
// for room tenants at half use, and returns them. sh.mu is held.
func (sh *shard) rebuild(room int) *[]entry {
	n := 8
	for n < 2*room {
		n *= 2
	}
	es := make([]entry, n)
	if p := sh.entries.Load(); p != nil {
		for i := range *p {
			tn, h := (*p)[i].tn.Load(), (*p)[i].hash.Load()
			if tn == nil || tn == tombstone {
				continue
			}
			pr := probeOf(h, n)
			for es[pr.at].tn.Load() != nil {
				pr.next()
			}
			es[pr.at].set(h, tn)
		}
	}
	sh.used = sh.n
	sh.entries.Store(&es)
	return &es
}

// reset forgets k's tenant but for the leases of its requests in flight,
// which count requests that still run: a tenant without them is dropped,
// one with them keeps them alone, its main bucket full again.
func (tb *table) reset(k *lookup) {
	sh := k.sh
	sh.mu.Lock()
	defer sh.mu.Unlock()
	p := sh.entries.Load()
	if p == nil {
		return
	}
	es := *p
	for pr := probeOf(k.h, len(es)); ; pr.next() {
		i := pr.at
		tn := es[i].tn.Load()
		if tn == nil {
			return
		}
		if tn == tombstone || es[i].hash.Load() != k.h || !k.is(tn) {
			continue
		}
		tn.mu.Lock()
		defer tn.mu.Unlock()
		var kept []ruleState
		if tn.others != nil {
			for _, o := range *tn.others {
				if o.kind == storekit.InFlight && o.inFlight() > 0 {
					kept = append(kept, o)
				}
			}
		}
		if len(kept) == 0 {
			tn.tat.Store(deadTAT)
			sh.drop(&es[i])
			return
		}
		// A lock-free Take that read the old TAT fails its
		// compare-and-swap and takes from the full bucket.
		*tn.others = kept
		tn.tat.Store(fullTAT)
		return
	}
}

// drop takes the tenant of e out of sh. sh.mu is held.
func (sh *shard) drop(e *entry) {
	e.tn.Store(tombstone)
	sh.n--
}

// scan calls visit on the tenants of sh, from entry from round to the one
// before it, and takes out those it drops, until visit asks to stop. It
// returns the entry after the last one visited. sh.mu is held.
func (sh *shard) scan(from int, visit func(tn *tenant) (drop, stop bool)) int {
	p := sh.entries.Load()
	if p == nil {
		return 0
	}
	es := *p
	mask := len(es) - 1
	for j := range es {
		i := (from + j) & mask
		tn := es[i].tn.Load()
		if tn == nil || tn == tombstone {
			continue
		}
		drop, stop := visit(tn)
		if drop {
			sh.drop(&es[i])
		}
		if stop {
			return (i + 1) & mask
		}
	}
	return from & mask
}
