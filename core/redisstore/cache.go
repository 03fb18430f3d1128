package redisstore

import (
	"hash/maphash"
	"sync"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// A denialCache remembers, for buckets that Redis reported too empty to
// serve a request, a lower bound of their TAT on the local monotonic clock,
// so that requests those buckets could not serve either are denied without a
// round trip.
//
// It is exact. Redis's answer gives rel, the TAT minus the server's now when
// the script ran; the script ran after the request was sent, so sent + rel
// is at most the TAT in local time. A bucket's TAT never moves back (an
// allowed request moves it forward, a denied one leaves it, and the key
// expires only once the TAT has passed, which is the same state), so a
// request that GCRA denies against this lower bound is one Redis would deny
// too. Entries are kept per limit: a request under another limit (a plan
// change) asks Redis.
//
// A nil *denialCache caches nothing.
type denialCache struct {
	seed     maphash.Seed
	perShard int
	shards   [cacheShards]cacheShard
}

const cacheShards = 64

type cacheShard struct {
	mu sync.RWMutex
	m  map[string]cacheEntry
	_  [32]byte // keep shards' locks off each other's cache lines
}

type cacheEntry struct {
	limit tollgate.Limit
	tat   int64 // lower bound of the TAT, local µs
}

func newDenialCache(size int) *denialCache {
	if size <= 0 {
		return nil
	}
	c := &denialCache{seed: maphash.MakeSeed(), perShard: (size + cacheShards - 1) / cacheShards}
	for i := range c.shards {
		c.shards[i].m = make(map[string]cacheEntry)
	}
	return c
}

func (c *denialCache) shard(rkey string) *cacheShard {
	return &c.shards[maphash.String(c.seed, rkey)%cacheShards]
}

// deny reports whether the request can be denied locally at now, and the
// Result Redis would give for it if no other replica has taken tokens since
// (tokens taken elsewhere only make the wait longer).
func (c *denialCache) deny(rkey string, limit tollgate.Limit, cost, now int64) (tollgate.Result, bool) {
	if c == nil {
		return tollgate.Result{}, false
	}
	sh := c.shard(rkey)
	sh.mu.RLock()
	e, ok := sh.m[rkey]
	sh.mu.RUnlock()
	if !ok || e.limit != limit || e.tat <= now {
		return tollgate.Result{}, false
	}
	_, r := tollgate.GCRA(e.tat, now, limit, cost)
	if r.Allowed {
		return tollgate.Result{}, false
	}
	return r, true
}

// learn records what the answer to call cl, sent at local time sent, tells
// of its bucket: always for a bucket already in the cache, whose figures
// must stay current, and otherwise only if the bucket can no longer serve a
// request like cl's.
func (c *denialCache) learn(cl *call, sent int64) {
	if c == nil {
		return
	}
	rel := cl.rel
	if cl.res.Allowed {
		rel += cl.need
	}
	tat := sent + rel
	useful := rel > cl.tolerance-cl.need
	sh := c.shard(cl.rkey)
	if !useful {
		sh.mu.RLock()
		_, ok := sh.m[cl.rkey]
		sh.mu.RUnlock()
		if !ok {
			return
		}
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[cl.rkey]
	switch {
	case ok && e.limit == cl.limit && e.tat >= tat:
		return // an answer that came back faster bounds the TAT better
	case !ok && !useful:
		return
	case !ok && len(sh.m) >= c.perShard:
		sh.evict(sent, c.perShard)
	}
	sh.m[cl.rkey] = cacheEntry{limit: cl.limit, tat: tat}
}

// evict makes room in a full shard: it drops the entries whose buckets are
// full again and, if that is not enough, an eighth of the shard (forgetting
// a denial is always safe), so that the scans stay rare.
func (sh *cacheShard) evict(now int64, limit int) {
	for k, e := range sh.m {
		if e.tat <= now {
			delete(sh.m, k)
		}
	}
	for k := range sh.m {
		if len(sh.m) <= limit-limit/8-1 {
			break
		}
		delete(sh.m, k)
	}
}

func (c *denialCache) len() int {
	if c == nil {
		return 0
	}
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.RLock()
		n += len(sh.m)
		sh.mu.RUnlock()
	}
	return n
}
