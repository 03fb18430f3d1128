package redisstore

import (
	"hash/maphash"
	"sync"
	"sync/atomic"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// A denialCache remembers, for tenants whose requests Redis denied, bounds
// of the state of each of their rules on the local monotonic clock, so that
// requests that could not be served either are denied without a round trip.
//
// It is exact. Redis's answer gives a bucket's rel, its TAT minus the
// server's now when the script ran; the script ran after the request was
// sent and before the answer came back, so sent + rel is at most the TAT in
// local time and received + rel at least. A bucket's TAT never moves back
// (an allowed request moves it forward, a denied one leaves it, and the key
// expires only once the TAT has passed, which is the same state), and a
// quota's count never falls within its period, so a request that is denied
// against the lower bounds is one Redis would deny too. The figures of a
// cached denial come from the upper bounds, so its RetryAfter is never
// earlier than Redis's, however long the round trip took. Resets and
// cancels, which do move state back, are announced on a channel that every
// Store listens to while its cache holds anything (see subscription), and
// data lost by Redis is noticed through the epoch key (see epochState): both
// empty the cache. Entries are kept per rule and limit: a request under
// another limit (a plan change) asks Redis.
//
// A nil *denialCache caches nothing.
type denialCache struct {
	seed     maphash.Seed
	perShard int
	size     atomic.Int64 // tenants held, for the epoch check and the subscription
	shards   [cacheShards]cacheShard
}

const cacheShards = 64

type cacheShard struct {
	mu sync.RWMutex
	m  map[string]*cacheEntry
	_  [32]byte // keep shards' locks off each other's cache lines
}

// A cacheEntry is what the cache knows of one tenant: one state per rule.
// It is never changed once in the map, only replaced.
type cacheEntry struct {
	rules []cachedRule
}

// A cachedRule bounds the state of one rule on the local clock.
type cachedRule struct {
	sub   string
	limit tollgate.Limit
	quota tollgate.Quota
	lo    int64 // bucket: TAT lower bound; quota: period end, lower bound
	hi    int64 // bucket: TAT upper bound; quota: period end, upper bound
	used  int64 // quota: tokens used, lower bound
}

func (r *cachedRule) matches(rule tollgate.Rule) bool {
	return r.sub == rule.Sub && r.quota == rule.Quota && (rule.IsQuota() || r.limit == rule.Limit)
}

func newDenialCache(size int) *denialCache {
	if size <= 0 {
		return nil
	}
	c := &denialCache{seed: maphash.MakeSeed(), perShard: (size + cacheShards - 1) / cacheShards}
	for i := range c.shards {
		c.shards[i].m = make(map[string]*cacheEntry)
	}
	return c
}

func (c *denialCache) shard(tenant string) *cacheShard {
	return &c.shards[maphash.String(c.seed, tenant)%cacheShards]
}

func (c *denialCache) get(tenant string) *cacheEntry {
	sh := c.shard(tenant)
	sh.mu.RLock()
	e := sh.m[tenant]
	sh.mu.RUnlock()
	return e
}

// answer answers c (an OpTake or OpInspect) at local time now if the cache
// knows every rule of its tenant and can tell that one of them denies it.
// Its Results are what Redis would answer if no other replica had taken
// tokens since (tokens taken elsewhere only make the wait longer).
func (c *denialCache) answer(cl *call, now int64) bool {
	if c == nil || c.size.Load() == 0 {
		return false
	}
	e := c.get(cl.tenant)
	if e == nil {
		return false
	}
	op := cl.op
	cost := op.Cost
	maxDelay := min(max(op.MaxDelay, 0), tollgate.MaxWindow).Microseconds()
	var found [8]*cachedRule
	rules := found[:0]
	denied := false
	for _, rule := range op.Rules {
		var m *cachedRule
		for i := range e.rules {
			if e.rules[i].matches(rule) {
				m = &e.rules[i]
				break
			}
		}
		if m == nil {
			return false
		}
		if rule.IsQuota() {
			if now >= m.lo {
				return false // the period may have ended
			}
			denied = denied || m.used+cost > rule.Quota.Tokens
		} else {
			interval := rule.Limit.TokenInterval()
			wait := max(m.lo-now, 0) + cost*interval - rule.Limit.Burst*interval
			denied = denied || wait > maxDelay
		}
		rules = append(rules, m)
	}
	if !denied {
		return false
	}
	n := len(op.Rules)
	if cap(op.Results) >= n {
		op.Results = op.Results[:n]
	} else {
		op.Results = make([]tollgate.Result, n)
	}
	for i, rule := range op.Rules {
		m := rules[i]
		var res tollgate.Result
		if rule.IsQuota() {
			left := max(m.hi-now, 0)
			over := m.used+cost > rule.Quota.Tokens
			res = tollgate.Result{Allowed: !over, Remaining: max(rule.Quota.Tokens-m.used, 0)}
			if over {
				res.RetryAfter = us(left)
			}
			if m.used > 0 {
				res.ResetAfter = us(left)
			}
		} else {
			interval := rule.Limit.TokenInterval()
			tol := rule.Limit.Burst * interval
			rel := max(m.hi-now, 0)
			wait := rel + cost*interval - tol
			res = tollgate.Result{Allowed: wait <= 0, Remaining: max(tol-rel, 0) / interval,
				RetryAfter: us(max(wait, 0)), ResetAfter: us(rel)}
		}
		op.Results[i] = res
	}
	op.Allowed, op.Delay, op.Marks = false, 0, op.Marks[:0]
	return true
}

// answerBucket is answer for a Take: one token bucket, the tenant's main
// one, without a call (and its allocation) to answer.
func (c *denialCache) answerBucket(tenant string, limit tollgate.Limit, cost, now int64) (tollgate.Result, bool) {
	if c == nil || c.size.Load() == 0 {
		return tollgate.Result{}, false
	}
	e := c.get(tenant)
	if e == nil {
		return tollgate.Result{}, false
	}
	for i := range e.rules {
		m := &e.rules[i]
		if m.sub != "" || !m.quota.IsZero() || m.limit != limit {
			continue
		}
		interval := limit.TokenInterval()
		tol, need := limit.Burst*interval, cost*interval
		if max(m.lo-now, 0)+need-tol <= 0 {
			return tollgate.Result{}, false
		}
		rel := max(m.hi-now, 0)
		wait := rel + need - tol
		return tollgate.Result{Remaining: max(tol-rel, 0) / interval, RetryAfter: us(max(wait, 0)), ResetAfter: us(rel)}, true
	}
	return tollgate.Result{}, false
}

// learn records what the answer v to cl, sent at local time sent and back
// at recv, on a server whose clock read now, tells of its tenant's rules:
// always for a tenant already in the cache, whose figures must stay current,
// and otherwise only if the Op was denied or a request like it no longer
// could be served.
func (c *denialCache) learn(s *Store, cl *call, now int64, v []int64, sent, recv int64) {
	if c == nil {
		return
	}
	op := cl.op
	granted := op.Kind == tollgate.OpTake && op.Allowed
	if granted && c.size.Load() == 0 && !emptied(cl, v) {
		return // the common case: nothing cached, nothing to cache
	}
	useful := !op.Allowed
	rules := make([]cachedRule, len(op.Rules))
	q := 0
	for i, rule := range op.Rules {
		x, y := v[1+i], int64(0)
		if rule.IsQuota() {
			x, y = x>>1, x&1
		}
		r := cachedRule{sub: rule.Sub, limit: rule.Limit, quota: rule.Quota}
		if rule.IsQuota() {
			b := cl.bounds[q]
			q++
			end := b.b1
			if y == 1 {
				end = b.b2
			}
			r.used = x
			if granted {
				r.used += op.Cost
			}
			r.lo, r.hi = sent+end-now, recv+end-now
			useful = useful || r.used+op.Cost > rule.Quota.Tokens
		} else {
			interval := rule.Limit.TokenInterval()
			rel := x
			if granted {
				rel += op.Cost * interval
			}
			r.lo, r.hi = sent+rel, recv+rel
			useful = useful || rel+op.Cost*interval > rule.Limit.Burst*interval
		}
		rules[i] = r
	}
	sh := c.shard(cl.tenant)
	sh.mu.Lock()
	old, ok := sh.m[cl.tenant]
	if !ok && !useful {
		sh.mu.Unlock()
		return
	}
	if ok {
		// Keep what the old entry knows of rules this Op does not have, and
		// the better lower bounds: an answer that came back faster bounds
		// the state more closely.
		for _, o := range old.rules {
			merged := false
			for i := range rules {
				r := &rules[i]
				if r.sub != o.sub {
					continue
				}
				merged = true
				if o.quota == r.quota && o.limit == r.limit {
					if r.quota.IsZero() {
						r.lo = max(r.lo, o.lo)
						r.hi = max(r.hi, r.lo)
					} else if o.hi >= r.lo && o.lo <= r.hi {
						r.used = max(r.used, o.used) // the same period
					}
				}
			}
			if !merged {
				rules = append(rules, o)
			}
		}
	} else if len(sh.m) >= c.perShard {
		sh.evict(sent, c.perShard, c)
	}
	sh.m[cl.tenant] = &cacheEntry{rules: rules}
	if !ok {
		c.size.Add(1)
	}
	sh.mu.Unlock()
	if !ok {
		s.sub.want()
	}
}

// emptied reports whether a granted Op left one of its rules unable to
// serve a request like it: a denial the cache can answer next time.
func emptied(cl *call, v []int64) bool {
	op := cl.op
	for i, rule := range op.Rules {
		x := v[1+i]
		if rule.IsQuota() {
			if x>>1+2*op.Cost > rule.Quota.Tokens {
				return true
			}
			continue
		}
		interval := rule.Limit.TokenInterval()
		if x+2*op.Cost*interval > rule.Limit.Burst*interval {
			return true
		}
	}
	return false
}

// forget drops what the cache knows of tenant.
func (c *denialCache) forget(tenant string) {
	if c == nil || c.size.Load() == 0 {
		return
	}
	sh := c.shard(tenant)
	sh.mu.Lock()
	if _, ok := sh.m[tenant]; ok {
		delete(sh.m, tenant)
		c.size.Add(-1)
	}
	sh.mu.Unlock()
}

// clear drops everything.
func (c *denialCache) clear() {
	if c == nil {
		return
	}
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		c.size.Add(-int64(len(sh.m)))
		clear(sh.m)
		sh.mu.Unlock()
	}
}

// evict makes room in a full shard: it drops the entries whose states are
// all past and, if that is not enough, an eighth of the shard (forgetting a
// denial is always safe), so that the scans stay rare.
func (sh *cacheShard) evict(now int64, limit int, c *denialCache) {
	for k, e := range sh.m {
		past := true
		for _, r := range e.rules {
			if r.lo > now {
				past = false
				break
			}
		}
		if past {
			delete(sh.m, k)
			c.size.Add(-1)
		}
	}
	for k := range sh.m {
		if len(sh.m) <= limit-limit/8-1 {
			break
		}
		delete(sh.m, k)
		c.size.Add(-1)
	}
}

func (c *denialCache) len() int {
	if c == nil {
		return 0
	}
	return int(c.size.Load())
}
