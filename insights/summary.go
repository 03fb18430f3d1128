package insights

import (
	"cmp"
	"math"
	"slices"
	"unicode/utf8"
)

// maxRoutes bounds the routes kept per tenant and bucket: enough to say
// where a tenant is throttled, few enough that a flood over many made-up
// routes costs nothing more.
const maxRoutes = 4

// A route is a method and route pattern and the throttled requests seen on
// it.
type route struct {
	method, route string
	throttled     int64
}

// A tally is what the tracker counts of one tenant in one time bucket. A
// tenant enters the bucket's summary on its first throttled request there,
// and leaves only when pushed out by heavier ones. Every count but weight
// and overcount is exact from the moment it entered; requests and near
// also hold what the bucket's sketches counted before (over-stated by a
// little, if at all); the peaks start when it entered.
type tally struct {
	// weight is the Space-Saving count: the tokens of the tenant's
	// throttled requests, over-estimated by at most overcount.
	weight, overcount int64

	throttled, throttledTokens int64 // denied and shadow-denied requests
	shadow                     int64 // of which shadow-denied
	inFlight                   int64 // of which for want of a slot of an in-flight policy
	near                       int64 // allowed requests that left little of the limit
	requests                   int64 // every decided request

	// peakSecond and peakMinute are the most tokens the tenant asked for
	// in one clock second and one clock minute.
	peakSecond, peakMinute int64

	first, last int64 // Unix nanoseconds

	// fit is the index, among the Tracker's plans from small to large, of
	// the smallest plan whose token bucket would have allowed every
	// request the tenant made while tracked; len(plans) if none would
	// have; -1 if no plans are known.
	fit int64
}

// A record is one tenant's tally in a closed (frozen) bucket.
type record struct {
	tenant, plan string
	tally
	routes []route // by throttled requests, descending; at most maxRoutes
}

// An entry is one tenant's tally in the open bucket, with the meters of its
// demand. Its routes live in the entry so that counting allocates nothing.
type entry struct {
	tenant, plan string
	tally
	routes  [maxRoutes]route
	nroutes int

	heapAt int32 // the entry's position in the summary's heap

	// The tenant's requests replayed against each plan's token bucket:
	// its theoretical arrival time, in Unix nanoseconds (GCRA), and a bit
	// per plan that would have denied one of them.
	tats    [maxPlans]int64
	vdenied uint32

	second, secondTokens int64 // the clock second being metered, and its tokens so far
	minute, minuteTokens int64
}

// A summary is the Space-Saving summary of one open bucket: the at most k
// tenants with the most throttled tokens, found in one pass over the
// decisions in O(log k) each whatever the number of tenants. A tenant that
// is not tracked replaces the one with the least weight and inherits its
// weight as overcount, so every tenant whose throttled tokens exceed 1/k of
// the bucket's total is certainly tracked (Metwally, Agrawal and El Abbadi,
// 2005). It is not safe for concurrent use; the Tracker locks around it.
type summary struct {
	k       int
	entries []entry
	index   map[string]int32
	heap    []int32 // min-heap of entry indices by weight
	total   int64   // throttled tokens seen, tracked or not
	plans   int     // the plans replayed in each entry

	// untracked counts the tenants not tracked yet.
	untracked *sketch
}

func newSummary(k, plans int) *summary {
	return &summary{k: k, plans: plans, index: make(map[string]int32, min(k, 1024)),
		untracked: newSketch()}
}

// fit returns the index of the smallest plan that would have allowed all of
// e's requests, len(plans) if none, or -1 without plans.
func (s *summary) fit(e *entry) int64 {
	if s.plans == 0 {
		return -1
	}
	for i := range s.plans {
		if e.vdenied&(1<<i) == 0 {
			return int64(i)
		}
	}
	return int64(s.plans)
}

// reset empties s for the next bucket, keeping its memory.
func (s *summary) reset() {
	clear(s.index)
	clear(s.entries) // drop the strings they hold
	s.entries = s.entries[:0]
	s.heap = s.heap[:0]
	s.total = 0
	s.untracked.reset()
}

// lookup returns the entry of tenant, or nil.
func (s *summary) lookup(tenant string) *entry {
	if i, ok := s.index[tenant]; ok {
		return &s.entries[i]
	}
	return nil
}

// admit starts tracking tenant, pushing out the lightest tenant when s is
// full.
func (s *summary) admit(tenant string, now int64) *entry {
	if len(s.entries) < s.k {
		i := int32(len(s.entries))
		s.entries = append(s.entries, entry{tenant: tenant, heapAt: int32(len(s.heap))})
		s.heap = append(s.heap, i)
		s.index[tenant] = i
		e := &s.entries[i]
		e.first = now
		return e
	}
	i := s.heap[0]
	e := &s.entries[i]
	delete(s.index, e.tenant)
	floor := e.weight
	*e = entry{tenant: tenant, heapAt: 0}
	e.weight, e.overcount, e.first = floor, floor, now
	s.index[tenant] = i
	return e
}

// addWeight adds w to e's weight and restores the heap.
func (s *summary) addWeight(e *entry, w int64) {
	e.weight = addCount(e.weight, w)
	s.down(int(e.heapAt))
}

// addCount returns a+b for counts, which are never negative, or the largest
// int64 if the sum would overflow: costs run to the largest burst a plan may
// have, and a summary read from the exchange may hold anything, so a sum
// must stop at the top rather than wrap to a negative count.
func addCount(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// down moves the heap element at position p towards the leaves until its
// children weigh no less.
func (s *summary) down(p int) {
	h, n := s.heap, len(s.heap)
	for {
		c := 2*p + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && s.entries[h[r]].weight < s.entries[h[c]].weight {
			c = r
		}
		if s.entries[h[p]].weight <= s.entries[h[c]].weight {
			break
		}
		h[p], h[c] = h[c], h[p]
		s.entries[h[p]].heapAt = int32(p)
		s.entries[h[c]].heapAt = int32(c)
		p = c
	}
}

// floor returns the weight that a tenant absent from s may have had: the
// least weight tracked when s is full, else 0.
func (s *summary) floor() int64 {
	if len(s.entries) < s.k || len(s.heap) == 0 {
		return 0
	}
	return s.entries[s.heap[0]].weight
}

// meter records cost tokens asked for at now in e's demand meters.
func (e *entry) meter(now, cost int64) {
	if sec := now / 1e9; sec != e.second {
		e.second, e.secondTokens = sec, 0
	}
	if m := now / 60e9; m != e.minute {
		e.minute, e.minuteTokens = m, 0
	}
	e.secondTokens = addCount(e.secondTokens, cost)
	e.minuteTokens = addCount(e.minuteTokens, cost)
	e.peakSecond = max(e.peakSecond, e.secondTokens)
	e.peakMinute = max(e.peakMinute, e.minuteTokens)
}

// maxRouteLength bounds the route and method names kept: router patterns
// are short, and a summary must stay small and decodable by every replica.
const maxRouteLength = 200

// clip shortens s to at most maxRouteLength bytes, at a rune boundary.
func clip(s string) string {
	if len(s) <= maxRouteLength {
		return s
	}
	n := maxRouteLength
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// addRoute counts a throttled request on method and path. When the routes
// are full, the least throttled is replaced and its count inherited, as in
// the summary itself, so the busiest routes stay.
func (e *entry) addRoute(method, path string) {
	method, path = clip(method), clip(path)
	least := 0
	for i := 0; i < e.nroutes; i++ {
		r := &e.routes[i]
		if r.route == path && r.method == method {
			r.throttled = addCount(r.throttled, 1)
			return
		}
		if r.throttled < e.routes[least].throttled {
			least = i
		}
	}
	if e.nroutes < maxRoutes {
		e.routes[e.nroutes] = route{method: method, route: path, throttled: 1}
		e.nroutes++
		return
	}
	e.routes[least] = route{method: method, route: path, throttled: addCount(e.routes[least].throttled, 1)}
}

// A frozen is the summary of a closed bucket, or a merge of several: at most
// k records, by weight, descending, if it is a merge (a merge sorts). It is
// never changed once made, so readers share it without locks.
type frozen struct {
	start, width int64 // seconds since the Unix epoch; seconds
	records      []record
	floor        int64 // as summary.floor
	total        int64
}

// freeze copies s into a frozen bucket starting at start.
func (s *summary) freeze(start, width int64) *frozen {
	f := &frozen{start: start, width: width, floor: s.floor(), total: s.total,
		records: make([]record, len(s.entries))}
	nroutes := 0
	for i := range s.entries {
		nroutes += s.entries[i].nroutes
	}
	routes := make([]route, 0, nroutes) // one allocation for every record's routes
	for i := range s.entries {
		e := &s.entries[i]
		at := len(routes)
		routes = append(routes, e.routes[:e.nroutes]...)
		rs := routes[at:len(routes):len(routes)]
		sortRoutes(rs)
		f.records[i] = record{tenant: e.tenant, plan: e.plan, tally: e.tally, routes: rs}
		f.records[i].fit = s.fit(e)
	}
	return f
}

func sortRecords(rs []record) {
	slices.SortFunc(rs, func(a, b record) int {
		if c := cmp.Compare(b.weight, a.weight); c != 0 {
			return c
		}
		return cmp.Compare(a.tenant, b.tenant)
	})
}

func sortRoutes(rs []route) {
	slices.SortFunc(rs, func(a, b route) int {
		if c := cmp.Compare(b.throttled, a.throttled); c != 0 {
			return c
		}
		if c := cmp.Compare(a.route, b.route); c != 0 {
			return c
		}
		return cmp.Compare(a.method, b.method)
	})
}

// How merge combines two tallies of one tenant.
type mergeMode uint8

const (
	// overTime merges buckets of one replica that follow each other: a
	// peak of the whole is the larger of the parts' peaks.
	overTime mergeMode = iota
	// acrossReplicas merges the same bucket of several replicas, each of
	// which saw part of a tenant's requests: the parts' peaks add up. The
	// sum over-states a peak only if the replicas' peaks fell at different
	// moments, which a load balancer spreading one tenant's steady flood
	// makes unusual; it never under-states one.
	acrossReplicas
)

// merge combines parts into one summary of at most k records starting at
// start and width long. Weights stay upper bounds: a tenant missing from a
// full part may have had up to that part's floor there, which is added to
// its weight and its overcount (the merge of Space-Saving summaries of
// Berinde, Indyk, Cormode and Strauss, 2010). Ties are broken by tenant, so
// that the same parts give the same result on every replica.
func merge(parts []*frozen, k int, start, width int64, mode mergeMode) *frozen {
	out := &frozen{start: start, width: width}
	n := 0
	for _, p := range parts {
		if p != nil {
			n += len(p.records)
		}
	}
	at := make(map[string]int, min(n, 4*k))
	recs := make([]record, 0, min(n, 4*k))
	present := make([]int64, 0, cap(recs)) // the floors of the parts each record was in
	var floors int64
	for _, p := range parts {
		if p == nil {
			continue
		}
		floors = addCount(floors, p.floor)
		out.total = addCount(out.total, p.total)
		for i := range p.records {
			r := &p.records[i]
			j, ok := at[r.tenant]
			if !ok {
				at[r.tenant] = len(recs)
				recs = append(recs, record{tenant: r.tenant, plan: r.plan, tally: r.tally, routes: r.routes})
				present = append(present, p.floor)
				continue
			}
			present[j] = addCount(present[j], p.floor)
			combine(&recs[j], r, mode)
		}
	}
	for j := range recs {
		missing := floors - present[j] // >= 0: present[j] sums some of floors' parts
		recs[j].weight = addCount(recs[j].weight, missing)
		recs[j].overcount = addCount(recs[j].overcount, missing)
	}
	sortRecords(recs)
	out.floor = floors
	if len(recs) > k {
		out.floor = max(floors, recs[k].weight)
		clear(recs[k:])
		recs = recs[:k:k]
	}
	// Copy the routes into one array of the merge's own, so that it does
	// not keep the arrays of every part alive.
	nroutes := 0
	for j := range recs {
		nroutes += len(recs[j].routes)
	}
	routes := make([]route, 0, nroutes)
	for j := range recs {
		at := len(routes)
		routes = append(routes, recs[j].routes...)
		recs[j].routes = routes[at:len(routes):len(routes)]
	}
	out.records = recs
	return out
}

// combine adds r's tally to a's.
func combine(a, r *record, mode mergeMode) {
	if r.last > a.last && r.plan != "" || a.plan == "" {
		a.plan = r.plan
	}
	t, u := &a.tally, &r.tally
	t.weight = addCount(t.weight, u.weight)
	t.overcount = addCount(t.overcount, u.overcount)
	t.throttled = addCount(t.throttled, u.throttled)
	t.throttledTokens = addCount(t.throttledTokens, u.throttledTokens)
	t.shadow = addCount(t.shadow, u.shadow)
	t.inFlight = addCount(t.inFlight, u.inFlight)
	t.near = addCount(t.near, u.near)
	t.requests = addCount(t.requests, u.requests)
	if mode == acrossReplicas {
		t.peakSecond = addCount(t.peakSecond, u.peakSecond)
		t.peakMinute = addCount(t.peakMinute, u.peakMinute)
	} else {
		t.peakSecond = max(t.peakSecond, u.peakSecond)
		t.peakMinute = max(t.peakMinute, u.peakMinute)
	}
	t.first = min(t.first, u.first)
	t.last = max(t.last, u.last)
	t.fit = max(t.fit, u.fit) // a plan that failed one part failed the whole
	a.routes = mergeRoutes(a.routes, r.routes)
}

// mergeRoutes returns the busiest maxRoutes of a and b, counts added. It
// never changes a or b, which other buckets may share.
func mergeRoutes(a, b []route) []route {
	if len(b) == 0 {
		return a
	}
	out := make([]route, len(a), len(a)+len(b))
	copy(out, a)
next:
	for _, r := range b {
		for i := range out {
			if out[i].route == r.route && out[i].method == r.method {
				out[i].throttled = addCount(out[i].throttled, r.throttled)
				continue next
			}
		}
		out = append(out, r)
	}
	sortRoutes(out)
	if len(out) > maxRoutes {
		out = out[:maxRoutes:maxRoutes]
	}
	return out
}
