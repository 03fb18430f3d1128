package metrickit

import (
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// Other is the label value that stands for the values the cardinality
// limit folded away, and for store error kinds past the sixteenth.
const Other = "other"

// MaxLabelLength bounds a label value in bytes; longer ones are cut.
const MaxLabelLength = 256

// maxKinds bounds the store error kinds counted apart; the rest are Other.
const maxKinds = 16

// outcomeNames are the outcomes of tollgate.Decision.Outcome, by the index
// a series counts them under; index 0 counts outcomes this package does not
// know, so that a newer core adds a series rather than losing decisions.
var outcomeNames = [...]string{"unknown", "allowed", "delayed", "denied", "shadow_denied", "failed_open", "failed_closed", "rejected"}

const (
	outcomes         = len(outcomeNames)
	allowed, delayed = 1, 2
)

// fallbackOutcomes are the outcomes a decision of the fallback store can
// have: outcomeNames[1:5].
var fallbackOutcomes = outcomeNames[1:5]

// outcomeIndex returns the index of outcome in outcomeNames, or 0.
func outcomeIndex(outcome string) int {
	for i := 1; i < outcomes; i++ {
		if outcomeNames[i] == outcome {
			return i
		}
	}
	return 0
}

// policyKinds are the kinds of tollgate.Decision.PolicyKind, by the index
// a series counts its denials under; index 0 counts kinds this package does
// not know, so that a newer core adds a series rather than losing them.
var policyKinds = [...]string{"unknown", "bucket", "quota", "in-flight"}

// kindIndex returns the index of kind in policyKinds, or 0.
func kindIndex(kind string) int {
	for i := 1; i < len(policyKinds); i++ {
		if policyKinds[i] == kind {
			return i
		}
	}
	return 0
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
	// refusals counts the denied decisions by the kind of the policy
	// that denied them (policyKinds).
	refusals [len(policyKinds)]atomic.Uint64
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
	n := s.decisions(allowed, stride) + s.decisions(delayed, stride)
	if sum := n + s.extra.Load(); sum >= n {
		return sum
	}
	return ^uint64(0)
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
	delay         *histogram      // nil when the exporter records delays itself

	stores []store

	limitersMu sync.Mutex
	limiters   []*tollgate.Limiter // whose slots held InFlightSlots reports
	slotPlans  map[string]bool     // the plans it reported, to report 0 when they hold none
}

type kindCount struct {
	kind string
	n    atomic.Uint64
}

// New returns a Tally configured by o, or o's mistakes. It keeps at most
// o.Limit label sets as they come, then up to o.Limit/4 more with the
// route Other, then one with every label Other. With histograms it counts
// store latencies in buckets that bracket o.StoreTimeout (see Latency) and
// the delays of delayed decisions (see Delay); without, the exporter
// records both itself.
func New(o Options, histograms bool) (*Tally, error) {
	if err := o.Err(); err != nil {
		return nil, err
	}
	fold := o.Limit + max(o.Limit/4, 1)
	size := 1
	for size < 2*(fold+1) {
		size <<= 1
	}
	t := &Tally{
		seed:      maphash.MakeSeed(),
		limit:     int64(o.Limit),
		foldLimit: int64(fold),
		slots:     make([]atomic.Pointer[series], size),
		mask:      uint64(size - 1),
		stride:    1,
		stores:    o.stores,
	}
	t.kinds.Store(&[]*kindCount{})
	if histograms {
		t.latencyBounds = LatencyBounds(o.StoreTimeout)
		t.stride = len(t.latencyBounds) + 2
		t.delay = newHistogram(DelayBounds)
	}
	return t, nil
}

// Observe counts d. It neither locks nor allocates once d's label set is
// known.
func (t *Tally) Observe(d *tollgate.Decision) {
	t.count(&event{Labels{d.Plan, d.Policy, d.Route}, d.Outcome(), d.FailureKind(), d.Cost, d.Latency, d.Delay, d.Fallback, d.PolicyKind()})
}

// An event is what a Tally counts of a decision.
type event struct {
	Labels
	Outcome, Failure string
	Cost             int64
	Latency, Delay   time.Duration
	Fallback         bool
	Kind             string // of the policy the labels name (tollgate.Decision.PolicyKind)
}

// denied is the index of the outcome "denied".
const denied = 3

func (t *Tally) count(e *event) {
	s := t.lookup(e.Labels)
	oc := outcomeIndex(e.Outcome)
	i := oc * t.stride
	if t.stride > 1 {
		if storeCalled(e.Latency, e.Outcome, e.Failure) {
			i += bucket(t.latencyBounds, e.Latency)
			s.latency.Add(int64(e.Latency))
		} else {
			i += t.stride - 1
		}
	}
	s.counts[i].Add(1)
	if e.Cost > 1 && (oc == allowed || oc == delayed) {
		addSaturating(&s.extra, uint64(e.Cost-1))
	}
	if oc == denied {
		s.refusals[kindIndex(e.Kind)].Add(1)
	}
	if oc == delayed && t.delay != nil {
		t.delay.observe(e.Delay)
	}
	if e.Fallback {
		t.fallback[oc].Add(1)
	}
	switch {
	case e.Failure == "", e.Outcome == "rejected":
		// A rejected request is counted among the decisions; it is
		// not the store's failure.
	case e.Failure == "resolver":
		t.resolverErrors.Add(1)
	default:
		t.kind(e.Failure).n.Add(1)
	}
}

// StoreCalled reports whether the decision d called the store, whose
// latency it then carries: every decision but those that failed before
// the store, a rejected request or an unresolved plan.
func StoreCalled(d *tollgate.Decision) bool {
	return storeCalled(d.Latency, d.Outcome(), d.FailureKind())
}

func storeCalled(latency time.Duration, outcome, failure string) bool {
	return latency > 0 || (outcome != "rejected" && failure != "resolver")
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

// decisions calls fn for every label set kept and every outcome, with the
// number of decisions, values that differ only past MaxLabelLength or in
// invalid UTF-8 added up. Outcomes this package does not know come as
// "unknown", and only when there were some.
func (t *Tally) decisions(fn func(l Labels, outcome string, n uint64)) {
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
		for i, n := range sum {
			if i > 0 || n > 0 {
				fn(l, outcomeNames[i], n)
			}
		}
	}
}

// tokens calls fn for every plan and route with the tokens that their
// allowed and delayed decisions took, every policy together.
func (t *Tally) tokens(fn func(plan, route string, n uint64)) {
	type planRoute struct{ plan, route string }
	sums := map[planRoute]uint64{}
	var order []planRoute
	t.eachSeries(func(s *series) {
		k := planRoute{s.Plan, s.Route}
		old, ok := sums[k]
		if !ok {
			order = append(order, k)
		}
		sums[k] = old + min(s.tokens(t.stride), ^uint64(0)-old)
	})
	for _, k := range order {
		fn(k.plan, k.route, sums[k])
	}
}

// refusals calls fn for every plan and policy kind with the denied
// decisions of that plan whose policy of that kind denied them; kinds
// without any are left out.
func (t *Tally) refusals(fn func(plan, kind string, n uint64)) {
	type planKind struct {
		plan string
		kind int
	}
	sums := map[planKind]uint64{}
	var order []planKind
	t.eachSeries(func(s *series) {
		for i := range s.refusals {
			n := s.refusals[i].Load()
			if n == 0 {
				continue
			}
			k := planKind{s.Plan, i}
			old, ok := sums[k]
			if !ok {
				order = append(order, k)
			}
			sums[k] = old + min(n, ^uint64(0)-old)
		}
	})
	for _, k := range order {
		fn(k.plan, policyKinds[k.kind], sums[k])
	}
}

// AddLimiter makes the Tally report the slots of in-flight policies that
// l's requests hold (InFlightSlots), by plan, with those of the other
// Limiters added.
func (t *Tally) AddLimiter(l *tollgate.Limiter) {
	if l == nil {
		return
	}
	t.limitersMu.Lock()
	defer t.limitersMu.Unlock()
	for _, have := range t.limiters {
		if have == l {
			return
		}
	}
	t.limiters = append(t.limiters, l)
}

// maxSlotPlans bounds the plans InFlightSlots reports, against plans made
// per tenant: past it, the slots of new plans are reported under Other.
const maxSlotPlans = 1000

// slotsHeld calls fn with the slots held by the requests of each plan: the
// plans that hold some now, and 0 for those that held some before.
func (t *Tally) slotsHeld(fn func(plan string, n uint64)) {
	t.limitersMu.Lock()
	defer t.limitersMu.Unlock()
	if len(t.limiters) == 0 {
		return
	}
	if t.slotPlans == nil {
		t.slotPlans = map[string]bool{}
	}
	sums := map[string]uint64{}
	for _, l := range t.limiters {
		for plan, n := range l.SlotsHeld() {
			plan = labelValue(plan)
			if !t.slotPlans[plan] && len(t.slotPlans) >= maxSlotPlans {
				plan = Other
			}
			t.slotPlans[plan] = true
			sums[plan] += uint64(max(n, 0))
		}
	}
	plans := make([]string, 0, len(t.slotPlans))
	for plan := range t.slotPlans {
		plans = append(plans, plan)
	}
	slices.Sort(plans)
	for _, plan := range plans {
		fn(plan, sums[plan])
	}
}

func (t *Tally) eachSeries(fn func(*series)) {
	for i := range t.slots {
		if s := t.slots[i].Load(); s != nil {
			fn(s)
		}
	}
}

// storeErrors calls fn with every store error kind and its count.
func (t *Tally) storeErrors(fn func(kind string, n uint64)) {
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
	return snapshot(t.latencyBounds, buckets, time.Duration(sum).Seconds())
}

// Delay returns the histogram of the delays of delayed decisions; an
// empty Snapshot if the Tally does not count them.
func (t *Tally) Delay() Snapshot {
	if t.delay == nil {
		return Snapshot{}
	}
	return t.delay.snapshot()
}
