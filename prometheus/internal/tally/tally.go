// Package tally counts a Limiter's decisions for the metrics modules
// (tollgateprom, tollgateotel): plain atomic counters per label set, found
// without a lock or an allocation. The exporters read the counts when they
// are scraped or collected, so that an allowed decision costs a hash, a
// probe and two atomic adds, whatever the metrics library.
//
// The source lives in prometheus/internal/tally; otel/internal/tally is a
// copy made by go generate in otel/, which a test there keeps identical.
package tally

import (
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// Other is the label value that stands for the values the cardinality
// limit folded away.
const Other = "other"

// MaxLabelLength bounds a label value in bytes; longer ones are cut.
const MaxLabelLength = 256

// outcomes is one more than the largest tollgate.Outcome: index 0 counts
// outcomes this package does not know, so that a newer core never panics it.
const outcomes = int(tollgate.OutcomeRejected) + 1

// maxKinds bounds the error kinds counted apart; the rest are Other.
const maxKinds = 16

// Outcomes lists the outcomes a decision can have, in order.
var Outcomes = []tollgate.Outcome{
	tollgate.OutcomeAllowed, tollgate.OutcomeDelayed, tollgate.OutcomeDenied, tollgate.OutcomeShadowDenied,
	tollgate.OutcomeFailedOpen, tollgate.OutcomeFailedClosed, tollgate.OutcomeRejected,
}

// FallbackOutcomes lists the outcomes a decision of the fallback store can
// have.
var FallbackOutcomes = []tollgate.Outcome{
	tollgate.OutcomeAllowed, tollgate.OutcomeDelayed, tollgate.OutcomeDenied, tollgate.OutcomeShadowDenied,
}

// Labels identify a series.
type Labels struct{ Plan, Policy, Route string }

// A series counts the decisions of one label set.
type series struct {
	Labels // as the decisions named them, cut to MaxLabelLength and made valid UTF-8
	key    Labels
	hash   uint64

	// counts holds, for each outcome, a counter per store latency bucket
	// and one for decisions that did not call the store, so that a
	// decision and its latency take one atomic add, not two. Without
	// latency buckets (tollgateotel records latency in the SDK), one
	// counter per outcome.
	counts []atomic.Uint64
	// latency is the store latency of the decisions, in nanoseconds.
	latency atomic.Int64
	// extra is the tokens that allowed and delayed decisions took beyond
	// one each: most decisions cost 1, and then counting their tokens
	// costs nothing more.
	extra atomic.Uint64
}

// decisions returns the decisions of s that ended in outcome index o.
func (s *series) decisions(o int, stride int) uint64 {
	var n uint64
	for i := o * stride; i < (o+1)*stride; i++ {
		n += s.counts[i].Load()
	}
	return n
}

// tokens returns the tokens that allowed and delayed decisions of s took.
func (s *series) tokens(stride int) uint64 {
	return s.decisions(int(tollgate.OutcomeAllowed), stride) + s.decisions(int(tollgate.OutcomeDelayed), stride) + s.extra.Load()
}

// A Tally counts decisions. It is safe for concurrent use.
type Tally struct {
	seed      maphash.Seed
	limit     int64 // label sets kept as they come
	foldLimit int64 // label sets kept with the route folded
	slots     []atomic.Pointer[series]
	mask      uint64
	mu        sync.Mutex // serializes inserts
	sets      atomic.Int64

	overflow       atomic.Uint64
	fallback       [outcomes]atomic.Uint64
	resolverErrors atomic.Uint64
	kinds          atomic.Pointer[[]*kindCount] // copied on write
	kindsMu        sync.Mutex

	latencyBounds []time.Duration // nil when the exporter records latency itself
	stride        int             // counters per outcome in a series: len(latencyBounds)+2, or 1

	// Delay is the histogram of the delays of delayed decisions; nil when
	// the exporter records them itself.
	Delay *Histogram
}

type kindCount struct {
	kind string
	n    atomic.Uint64
}

// New returns a Tally that keeps at most limit label sets as they come
// (limit >= 1), then up to limit/4 more with the route "other", then one
// with every label "other". With histograms it counts store latencies in
// buckets that bracket storeTimeout (see Latency), and keeps Delay.
func New(limit int, storeTimeout time.Duration, histograms bool) *Tally {
	limit = max(limit, 1)
	fold := limit + max(limit/4, 1)
	size := 1
	for size < 2*(fold+1) {
		size <<= 1
	}
	t := &Tally{
		seed:      maphash.MakeSeed(),
		limit:     int64(limit),
		foldLimit: int64(fold),
		slots:     make([]atomic.Pointer[series], size),
		mask:      uint64(size - 1),
	}
	t.kinds.Store(&[]*kindCount{})
	t.stride = 1
	if histograms {
		t.latencyBounds = LatencyBounds(storeTimeout)
		t.stride = len(t.latencyBounds) + 2
		t.Delay = NewHistogram(DelayBounds)
	}
	return t
}

// Observe counts o. It neither locks nor allocates once o's label set is
// known.
func (t *Tally) Observe(o *tollgate.Observation) {
	s := t.lookup(Labels{o.Plan, o.Policy, o.Route})
	oc := int(o.Outcome)
	if oc >= outcomes {
		oc = 0
	}
	i := oc * t.stride
	if t.stride > 1 {
		if StoreCalled(o) {
			i += bucket(t.latencyBounds, o.StoreLatency)
			s.latency.Add(int64(o.StoreLatency))
		} else {
			i += t.stride - 1
		}
	}
	s.counts[i].Add(1)
	if o.Cost > 1 && (o.Outcome == tollgate.OutcomeAllowed || o.Outcome == tollgate.OutcomeDelayed) {
		s.extra.Add(uint64(o.Cost - 1))
	}
	if o.Outcome == tollgate.OutcomeDelayed && t.Delay != nil {
		t.Delay.Observe(o.Delay)
	}
	if o.Fallback {
		t.fallback[oc].Add(1)
	}
	if o.ErrorKind != "" {
		t.failed(o)
	}
}

// StoreCalled reports whether the decision o called the store, whose
// latency it then carries. A latency of 0 is a clock that did not move (a
// test's), not a store that was not called, unless the decision failed
// before the store: an unresolved plan or a rejected request.
func StoreCalled(o *tollgate.Observation) bool {
	return o.StoreLatency > 0 || (o.Outcome != tollgate.OutcomeRejected && o.ErrorKind != "resolver")
}

// failed counts the error of a failed decision.
func (t *Tally) failed(o *tollgate.Observation) {
	switch {
	case o.Outcome == tollgate.OutcomeRejected:
		// Counted among the decisions; not the store's failure.
	case o.ErrorKind == "resolver":
		t.resolverErrors.Add(1)
	default:
		t.kind(o.ErrorKind).n.Add(1)
	}
}

// kind returns the counter of the store error kind k.
func (t *Tally) kind(k string) *kindCount {
	if c := findKind(*t.kinds.Load(), k); c != nil {
		return c
	}
	t.kindsMu.Lock()
	defer t.kindsMu.Unlock()
	old := *t.kinds.Load()
	if c := findKind(old, k); c != nil {
		return c
	}
	c := &kindCount{kind: strings.Clone(k)} // lookups compare with the raw kind
	if len(old) == maxKinds {
		c.kind = Other
	}
	list := append(append([]*kindCount(nil), old...), c)
	t.kinds.Store(&list)
	return c
}

// findKind returns the counter of kind k in list, or nil. Past maxKinds,
// the last counter is Other's, which takes every kind not listed.
func findKind(list []*kindCount, k string) *kindCount {
	for i, c := range list {
		if i < maxKinds && c.kind == k {
			return c
		}
	}
	if len(list) > maxKinds {
		return list[maxKinds]
	}
	return nil
}

// lookup returns the series of k, or of its folded labels past the
// cardinality limit.
func (t *Tally) lookup(k Labels) *series {
	h := t.hash(k)
	if s := t.find(k, h); s != nil {
		return s
	}
	return t.slow(k, h)
}

// hash hashes k for the table: the route, the label a misconfigured router
// could fill from requests, with the seeded maphash; the plan and policy,
// which come from the application's plans, by their lengths and outer
// bytes, which is cheaper and spreads real plan names well enough. Equal
// hashes are told apart by comparing the labels.
func (t *Tally) hash(k Labels) uint64 {
	h := maphash.String(t.seed, k.Route)
	h ^= (outer(k.Plan) + uint64(len(k.Plan))) * 0x9e3779b97f4a7c15
	h ^= (outer(k.Policy) + uint64(len(k.Policy))<<32) * 0xc2b2ae3d27d4eb4f
	return h ^ h>>31
}

// outer returns the first and last eight bytes of s, mixed, or its bytes
// if it is shorter.
func outer(s string) uint64 {
	if len(s) >= 8 {
		return binary.LittleEndian.Uint64([]byte(s[:8])) ^ bits.RotateLeft64(binary.LittleEndian.Uint64([]byte(s[len(s)-8:])), 29)
	}
	var x uint64
	for i := 0; i < len(s); i++ {
		x = x<<8 | uint64(s[i])
	}
	return x
}

// find returns the series of k, whose hash is h, or nil. The table is never
// more than half full, so the probe ends.
func (t *Tally) find(k Labels, h uint64) *series {
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		s := t.slots[i].Load()
		if s == nil || (s.hash == h && s.key == k) {
			return s
		}
	}
}

// slow adds k's series, or finds where the limit folds k into.
func (t *Tally) slow(k Labels, h uint64) *series {
	if s := t.insert(k, h, t.limit); s != nil {
		return s
	}
	t.overflow.Add(1)
	k = Labels{k.Plan, k.Policy, Other}
	h = t.hash(k)
	if s := t.find(k, h); s != nil {
		return s
	}
	if s := t.insert(k, h, t.foldLimit); s != nil {
		return s
	}
	k = Labels{Other, Other, Other}
	h = t.hash(k)
	if s := t.find(k, h); s != nil {
		return s
	}
	return t.insert(k, h, t.foldLimit+1)
}

// insert adds a series for k unless there are bound label sets already,
// and returns it, or the one another goroutine added meanwhile.
func (t *Tally) insert(k Labels, h uint64, bound int64) *series {
	if t.sets.Load() >= bound {
		return nil // without the lock: the overflow path stays lock-free
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.find(k, h); s != nil {
		return s
	}
	if t.sets.Load() >= bound {
		return nil
	}
	// The decision's strings may be a framework's memory: keep copies.
	key := Labels{strings.Clone(k.Plan), strings.Clone(k.Policy), strings.Clone(k.Route)}
	s := &series{
		Labels: Labels{labelValue(key.Plan), labelValue(key.Policy), labelValue(key.Route)},
		key:    key,
		hash:   h,
		counts: make([]atomic.Uint64, outcomes*t.stride),
	}
	i := h & t.mask
	for t.slots[i].Load() != nil {
		i = (i + 1) & t.mask
	}
	t.slots[i].Store(s)
	t.sets.Add(1)
	return s
}

// labelValue returns s as a label value: valid UTF-8 (a run of invalid
// bytes becomes U+FFFD), cut at a rune boundary to at most MaxLabelLength
// bytes.
func labelValue(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > MaxLabelLength {
		cut := MaxLabelLength
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}

// Decisions calls fn for every label set kept and every outcome, with the
// number of decisions, values that differ only past MaxLabelLength or in
// invalid UTF-8 added up. Outcomes this package does not know come as
// Outcome 0, and only when there were some.
func (t *Tally) Decisions(fn func(l Labels, o tollgate.Outcome, n uint64)) {
	sums := map[Labels]*[outcomes]uint64{}
	var order []Labels
	t.eachSeries(func(s *series) {
		sum := sums[s.Labels]
		if sum == nil {
			sum = new([outcomes]uint64)
			sums[s.Labels] = sum
			order = append(order, s.Labels)
		}
		for i := range sum {
			sum[i] += s.decisions(i, t.stride)
		}
	})
	for _, l := range order {
		sum := sums[l]
		if sum[0] > 0 {
			fn(l, 0, sum[0])
		}
		for _, o := range Outcomes {
			fn(l, o, sum[o])
		}
	}
}

// Tokens calls fn for every plan and route with the tokens that their
// allowed and delayed decisions took, every policy together; a cost below
// 1 counts as 1, as the Limiter takes it.
func (t *Tally) Tokens(fn func(plan, route string, n uint64)) {
	type planRoute struct{ plan, route string }
	sums := map[planRoute]uint64{}
	var order []planRoute
	t.eachSeries(func(s *series) {
		k := planRoute{s.Plan, s.Route}
		if _, ok := sums[k]; !ok {
			order = append(order, k)
		}
		sums[k] += s.tokens(t.stride)
	})
	for _, k := range order {
		fn(k.plan, k.route, sums[k])
	}
}

func (t *Tally) eachSeries(fn func(*series)) {
	for i := range t.slots {
		if s := t.slots[i].Load(); s != nil {
			fn(s)
		}
	}
}

// Latency returns the store latency histogram, every label set together;
// an empty Snapshot if the Tally does not count latencies.
func (t *Tally) Latency() Snapshot {
	if t.latencyBounds == nil {
		return Snapshot{}
	}
	buckets := make([]uint64, len(t.latencyBounds)+1)
	var sum int64
	t.eachSeries(func(s *series) {
		for o := range outcomes {
			for b := range buckets {
				buckets[b] += s.counts[o*t.stride+b].Load()
			}
		}
		sum += s.latency.Load()
	})
	return snapshot(t.latencyBounds, buckets, time.Duration(sum))
}

// Sets returns the number of label sets kept.
func (t *Tally) Sets() int { return int(t.sets.Load()) }

// Overflow returns how many decisions the cardinality limit folded.
func (t *Tally) Overflow() uint64 { return t.overflow.Load() }

// Fallback returns how many decisions of the fallback store ended in o.
func (t *Tally) Fallback(o tollgate.Outcome) uint64 {
	if int(o) >= outcomes {
		return 0
	}
	return t.fallback[o].Load()
}

// ResolverErrors returns how many decisions found no plan because the
// resolver failed.
func (t *Tally) ResolverErrors() uint64 { return t.resolverErrors.Load() }

// StoreErrors calls fn with every store error kind and its count.
func (t *Tally) StoreErrors(fn func(kind string, n uint64)) {
	sums := map[string]uint64{}
	var order []string
	for _, c := range *t.kinds.Load() {
		k := labelValue(c.kind)
		if _, ok := sums[k]; !ok {
			order = append(order, k)
		}
		sums[k] += c.n.Load()
	}
	for _, k := range order {
		fn(k, sums[k])
	}
}
