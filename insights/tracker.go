package insights

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// DefaultCapacity is k, the tenants a Tracker keeps per time bucket, unless
// WithCapacity says otherwise.
const DefaultCapacity = 1000

// MaxCapacity bounds k: a bucket's summary is merged and sent whole.
const MaxCapacity = 100_000

// DefaultNearLimit is the share of a limit below which an allowed request
// counts as close to the limit, unless WithNearLimit says otherwise.
const DefaultNearLimit = 0.1

// maxPlans bounds the plans a Tracker replays each tracked tenant's requests
// against, to suggest one.
const maxPlans = 16

// The tiers of time buckets. A bucket closes into the tier above, so a
// decision is counted once, in the open 5-minute bucket, and each window is
// read from the tier of its resolution: 12 five-minute buckets for the
// last hour, 24 hourly ones for the last day, 28 six-hour ones for the last
// week, each plus the bucket in progress.
var tiers = [...]struct {
	width int64 // seconds
	keep  int   // closed buckets a window shows
}{
	{5 * 60, 12},
	{60 * 60, 24},
	{6 * 60 * 60, 28},
}

// tierState holds the buckets of one tier.
type tierState struct {
	// current is the bucket being filled by the closed buckets of the tier
	// below; nil for tier 0, whose bucket in progress is Tracker.open.
	current *frozen
	closed  []*frozen // by start, ascending
}

// A Tracker finds the tenants that keep hitting their limits: the upgrade
// candidates. It is a tollgate.Observer: add it to a Limiter with
// tollgate.WithObserver, and it counts each tenant's throttled requests
// (denied and shadow-denied, those refused for want of an in-flight slot
// among them), weighted by cost, in a Space-Saving summary of at most k
// tenants per time bucket, whatever the number of tenants. For the
// tenants it tracks it also counts every request, the requests that left at
// most a tenth of the limit (WithNearLimit), the peak demand, the routes and
// when they were first and last seen. Candidates reports them
// over the last hour, day or week, with the smallest plan that would have
// served each one's peak (WithPlans).
//
// With WithExchange, replicas publish their summaries to a shared store
// (such as Redis, see the redisexchange package) and every replica reports
// the same fleet-wide candidates. Neither counting a decision nor a report
// ever waits on that store for long: a report that the store does not
// answer within a second gives the fleet's counts of its last answer,
// marked stale.
//
// Build one with New; the zero Tracker is not usable. A Tracker is safe for
// concurrent use.
type Tracker struct {
	k         int
	nearLimit float64
	plans     []tollgate.Plan // by size, ascending
	virtual   []virtualBucket // plans[i]'s token bucket
	now       func() time.Time
	testClock bool // now is a test's clock, which wins over decision times

	exchange   Exchange
	replica    string // the name WithExchange gave
	process    string // replica and this process's incarnation: its field in the exchange
	flushEvery time.Duration

	// mu guards the open bucket, which every decision writes to, and what
	// rotating it changes; tiersMu guards the tiers, and is taken before mu.
	mu        sync.Mutex
	open      *summary
	openStart int64 // seconds; the open bucket's start
	openEnd   int64 // nanoseconds; when the open bucket closes
	openDirty bool  // the open bucket changed since its last publication
	pending   []pendingBucket
	spare     *summary // an empty summary for the next bucket
	touched   []int64  // starts of 5-minute buckets changed since the last publication
	tiersMu   sync.Mutex
	tiers     [len(tiers)]tierState

	fleet     fleetCache
	pubMu     sync.Mutex   // guards pub and closed
	pub       *publication // the publication in progress, if any
	closed    bool
	stop      chan struct{}
	stopped   chan struct{}
	closeOnce sync.Once
}

var _ tollgate.Observer = (*Tracker)(nil)

// An Option configures a Tracker. Options may come in any order.
type Option func(*Tracker)

// WithCapacity sets k, the tenants kept per time bucket (default
// DefaultCapacity, at most MaxCapacity). Any tenant with more than 1/k of a
// bucket's throttled tokens is certainly kept; memory and the cost of a
// read grow with k.
func WithCapacity(k int) Option {
	return func(t *Tracker) { t.k = k }
}

// WithPlans gives the plans a tenant could be moved to, at most 16, such as
// tollgate.DefaultPlans() or a StaticResolver's Plans(): each candidate
// comes with the smallest of them (by rate, then burst) that would have
// served it. Without plans no plan is suggested.
func WithPlans(plans []tollgate.Plan) Option {
	return func(t *Tracker) { t.plans = append([]tollgate.Plan(nil), plans...) }
}

// WithNearLimit sets when an allowed request counts as close to its limit:
// when the tokens left are at most fraction of the policy's capacity
// (default DefaultNearLimit; 0 counts only requests that emptied it).
func WithNearLimit(fraction float64) Option {
	return func(t *Tracker) { t.nearLimit = fraction }
}

// withClock makes the Tracker read the time from now, for decisions too;
// tests reach it through export_test.go.
func withClock(now func() time.Time) Option {
	return func(t *Tracker) { t.now, t.testClock = now, now != nil }
}

// New returns a Tracker. It fails, naming the option, on a capacity out of
// range, a near-limit fraction outside [0, 1), an invalid plan, or an
// invalid exchange set-up. With WithExchange it starts publishing in the
// background until Close.
func New(opts ...Option) (*Tracker, error) {
	t := &Tracker{k: DefaultCapacity, nearLimit: DefaultNearLimit, now: time.Now, flushEvery: DefaultFlushInterval}
	for _, o := range opts {
		if o != nil {
			o(t)
		}
	}
	if t.k < 1 || t.k > MaxCapacity {
		return nil, fmt.Errorf("insights: New: WithCapacity: k must be 1 to %d, got %d", MaxCapacity, t.k)
	}
	if !(t.nearLimit >= 0 && t.nearLimit < 1) {
		return nil, fmt.Errorf("insights: New: WithNearLimit: fraction must be in [0, 1), got %v", t.nearLimit)
	}
	for i, p := range t.plans {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("insights: New: WithPlans: plan %d: %w", i, err)
		}
	}
	slices.SortStableFunc(t.plans, func(a, b tollgate.Plan) int {
		if c := cmp.Compare(a.Limit.Rate, b.Limit.Rate); c != 0 {
			return c
		}
		return cmp.Compare(a.Limit.Burst, b.Limit.Burst)
	})
	if len(t.plans) > maxPlans {
		return nil, fmt.Errorf("insights: New: WithPlans: at most %d plans, got %d", maxPlans, len(t.plans))
	}
	for _, p := range t.plans {
		interval := 1e9 / p.Limit.Rate
		t.virtual = append(t.virtual, virtualBucket{interval: interval, burst: p.Limit.Burst, window: int64(float64(p.Limit.Burst) * interval)})
	}
	if err := t.startExchange(); err != nil {
		return nil, err
	}
	t.open = newSummary(t.k, len(t.plans))
	t.openStart, t.openEnd = noBucket, 0
	return t, nil
}

// noBucket marks that no bucket is open yet.
const noBucket = -1 << 62

// Observe counts one decision. It implements tollgate.Observer: it takes one
// lock, never waits on the Exchange, and allocates nothing; it keeps the
// tenant's and the route's strings of the tenants it tracks (tollgate's
// adapters hand over copies).
func (t *Tracker) Observe(_ context.Context, d *tollgate.Decision) {
	t.record(&observed{Tenant: d.Tenant, Plan: d.Plan, Policy: d.Policy, Method: d.Method, Route: d.Route,
		Outcome: d.Outcome(), Cost: d.Cost, Remaining: d.Remaining, Capacity: d.Capacity(), Time: d.Time,
		InFlight: d.PolicyKind() == "in-flight"})
}

// observed is what a Tracker counts of a decision.
type observed struct {
	Tenant, Plan, Policy, Method, Route string
	Outcome                             string // as tollgate.Decision.Outcome names it
	Cost, Remaining, Capacity           int64
	Time                                time.Time
	InFlight                            bool // Policy caps requests in flight
}

func (t *Tracker) record(o *observed) {
	switch o.Outcome {
	case "allowed", "delayed", "denied", "shadow_denied", "failed_open", "failed_closed":
	default:
		return // never decided (a Limiter refuses such requests): nothing to count
	}
	if o.Tenant == "" || len(o.Tenant) > maxCodecString {
		return // no Limiter decides on such a tenant, and no summary could carry it
	}
	var now int64
	if t.testClock || o.Time.IsZero() {
		now = t.now().UnixNano()
	} else {
		now = o.Time.UnixNano()
	}
	throttled := o.Outcome == "denied" || o.Outcome == "shadow_denied"
	cost := max(o.Cost, 1)

	near := !throttled && o.Capacity > 0 && float64(o.Remaining) <= t.nearLimit*float64(o.Capacity) &&
		(o.Outcome == "allowed" || o.Outcome == "delayed")

	t.mu.Lock()
	rotated := now >= t.openEnd && t.rotate(now)
	t.count(o, now, cost, throttled, near)
	t.mu.Unlock()
	if rotated {
		go t.settle() // not on this request's time
	}
}

// count counts o in the open bucket. t.mu must be held.
func (t *Tracker) count(o *observed, now, cost int64, throttled, near bool) {
	s := t.open
	e := s.lookup(o.Tenant)
	if e == nil {
		sec, minute := now/1e9, now/60e9
		before := s.untracked.add(s.untracked.locate(o.Tenant), uint32(sec), uint32(minute), cost, near)
		if !throttled {
			return
		}
		e = s.admit(o.Tenant, now)
		e.requests, e.near = before.requests, before.near
		e.second, e.secondTokens, e.peakSecond = sec, before.secondTokens, before.secondTokens
		e.minute, e.minuteTokens, e.peakMinute = minute, before.minuteTokens, before.minuteTokens
		t.startReplay(e, o, now)
	}
	t.openDirty = true
	if o.Plan != "" {
		e.plan = o.Plan
	}
	e.last = now
	e.requests = addCount(e.requests, 1)
	e.meter(now, cost)
	t.replay(e, now, cost)
	switch {
	case throttled:
		s.total = addCount(s.total, cost)
		e.throttled = addCount(e.throttled, 1)
		e.throttledTokens = addCount(e.throttledTokens, cost)
		if o.Outcome == "shadow_denied" {
			e.shadow = addCount(e.shadow, 1)
		}
		if o.InFlight {
			e.inFlight = addCount(e.inFlight, 1)
		}
		e.addRoute(o.Method, o.Route)
		s.addWeight(e, cost)
	case near:
		e.near = addCount(e.near, 1)
	}
}

// A virtualBucket is a plan's token bucket, as GCRA sees it.
type virtualBucket struct {
	interval float64 // nanoseconds per token
	burst    int64
	window   int64 // burst * interval: how far ahead of now the TAT may run
}

// startReplay fills e's replayed buckets as its real one is now. A tenant
// enters on a throttled request, so its own plan's bucket was just emptied:
// each plan's bucket starts with the tokens the tenant has used taken out,
// and the plans bigger than its own hold what the extra burst would have
// left. When the request was denied by another policy than the plan's
// bucket (a quota, a budget), the bucket's state is unknown and it starts
// full.
func (t *Tracker) startReplay(e *entry, o *observed, now int64) {
	var used int64
	if o.Policy == o.Plan && o.Capacity > 0 {
		used = max(o.Capacity-o.Remaining, 0)
	}
	for i, v := range t.virtual {
		e.tats[i] = now + int64(float64(min(used, v.burst))*v.interval)
	}
}

// replay takes cost tokens at now from each plan's bucket of e, and notes
// the plans that would have denied the request. The arithmetic is in
// floating point until a request is known to fit, so that a cost near the
// largest burst cannot overflow the arrival time.
func (t *Tracker) replay(e *entry, now, cost int64) {
	for i := range t.virtual {
		v := &t.virtual[i]
		ahead := max(e.tats[i], now) - now // at most v.window
		need := float64(cost) * v.interval
		if float64(ahead)+need > float64(v.window) {
			e.vdenied |= 1 << i
			continue
		}
		e.tats[i] = now + ahead + int64(need)
	}
}

// rotate opens the bucket that holds now and reports whether it set the
// closed one aside, in t.pending, for settle to merge into the tiers on
// another goroutine: merging takes milliseconds, which no decision should
// wait for; until then, reads take the pending buckets as they are. A decision stamped before the open bucket (a request that
// started just before a boundary) is counted in the open one. t.mu must be
// held.
func (t *Tracker) rotate(now int64) bool {
	start := floorTo(floorDiv(now, 1e9), tiers[0].width)
	if start <= t.openStart {
		t.openEnd = (t.openStart + tiers[0].width) * 1e9
		return false
	}
	if t.openDirty {
		t.touched = append(t.touched, t.openStart)
		t.openDirty = false
	}
	closed := len(t.open.entries) > 0
	if closed {
		t.pending = append(t.pending, pendingBucket{start: t.openStart, sum: t.open})
		if t.spare != nil {
			t.open, t.spare = t.spare, nil
		} else {
			t.open = newSummary(t.k, len(t.plans))
		}
	} else {
		t.open.reset()
	}
	t.openStart, t.openEnd = start, (start+tiers[0].width)*1e9
	t.trimTouched()
	return closed
}

// A pendingBucket is a closed 5-minute bucket not yet merged into the tiers.
// Nothing writes to its summary any more.
type pendingBucket struct {
	start int64
	sum   *summary
}

// settle merges the pending buckets into the tiers, and keeps the last
// one's summary, emptied, as the next spare.
func (t *Tracker) settle() {
	t.tiersMu.Lock()
	defer t.tiersMu.Unlock()
	t.mu.Lock()
	pending := slices.Clone(t.pending)
	t.mu.Unlock()
	if len(pending) == 0 {
		return // another goroutine settled them
	}
	for _, p := range pending {
		t.close(0, p.sum.freeze(p.start, tiers[0].width))
	}
	t.mu.Lock()
	t.pending = slices.Delete(t.pending, 0, len(pending))
	t.mu.Unlock()
	// Readers look at pending summaries only while holding tiersMu, so
	// none is looking now.
	last := pending[len(pending)-1].sum
	last.reset()
	t.mu.Lock()
	if t.spare == nil {
		t.spare = last
	}
	t.mu.Unlock()
}

// close files f, a closed bucket of tier i, and merges it into the tier
// above. t.tiersMu must be held.
func (t *Tracker) close(i int, f *frozen) {
	ts := &t.tiers[i]
	ts.closed = append(ts.closed, f)
	cut := f.start - int64(tiers[i].keep)*tiers[i].width
	drop := 0
	for drop < len(ts.closed) && ts.closed[drop].start < cut {
		drop++
	}
	if drop > 0 {
		ts.closed = slices.Delete(ts.closed, 0, drop)
	}
	if i+1 == len(tiers) {
		return
	}
	up := &t.tiers[i+1]
	slot := floorTo(f.start, tiers[i+1].width)
	if up.current != nil && up.current.start != slot {
		c := up.current
		up.current = nil
		t.close(i+1, c)
	}
	up.current = merge([]*frozen{up.current, f}, t.k, slot, tiers[i+1].width, overTime)
}

// trimTouched forgets changed buckets too old for any window, which a
// publication that keeps failing would otherwise pile up.
func (t *Tracker) trimTouched() {
	last := len(tiers) - 1
	cut := t.openStart - int64(tiers[last].keep+1)*tiers[last].width
	t.touched = slices.DeleteFunc(t.touched, func(s int64) bool { return s < cut })
}

// slotParts returns the buckets, frozen, that hold what the Tracker counted
// in the tier-i bucket starting at slot; loose are the 5-minute buckets not
// yet merged into the tiers (see view). Each decision is in exactly one of
// them: a closed bucket has been merged into the tier above, the bucket in
// progress of a tier not yet. t.tiersMu must be held.
func (t *Tracker) slotParts(i int, slot int64, loose []*frozen, parts []*frozen) []*frozen {
	ts := &t.tiers[i]
	for _, b := range ts.closed {
		if b.start == slot {
			parts = append(parts, b)
		}
	}
	if c := ts.current; c != nil && c.start == slot {
		parts = append(parts, c)
	}
	for j := i - 1; j >= 1; j-- {
		if c := t.tiers[j].current; c != nil && floorTo(c.start, tiers[i].width) == slot {
			parts = append(parts, c)
		}
	}
	for _, b := range loose {
		if floorTo(b.start, tiers[i].width) == slot {
			parts = append(parts, b)
		}
	}
	return parts
}

// lockTiers takes t.tiersMu, which the caller must release, and returns the
// 5-minute buckets not yet merged into the tiers, frozen: the pending ones
// and the open one. It holds t.mu, which decisions wait for, only to copy
// the open bucket.
func (t *Tracker) lockTiers() []*frozen {
	t.tiersMu.Lock()
	t.mu.Lock()
	var open *frozen
	if len(t.open.entries) > 0 {
		open = t.open.freeze(t.openStart, tiers[0].width)
	}
	pending := slices.Clone(t.pending)
	t.mu.Unlock()
	loose := make([]*frozen, 0, len(pending)+1)
	for _, p := range pending {
		loose = append(loose, p.sum.freeze(p.start, tiers[0].width))
	}
	if open != nil {
		loose = append(loose, open)
	}
	return loose
}

// composite merges the parts of one slot into the slot's bucket.
func (t *Tracker) composite(i int, slot int64, parts []*frozen) *frozen {
	switch len(parts) {
	case 0:
		return nil
	case 1:
		if p := parts[0]; p.start == slot && p.width == tiers[i].width {
			return p
		}
	}
	return merge(parts, t.k, slot, tiers[i].width, overTime)
}

// localSlots returns this replica's buckets of tier i for the slots from
// first to last, one per slot (nil where nothing was counted).
func (t *Tracker) localSlots(i int, first, last int64) []*frozen {
	w := tiers[i].width
	partsBySlot := make([][]*frozen, (last-first)/w+1)
	loose := t.lockTiers()
	for n := range partsBySlot {
		partsBySlot[n] = t.slotParts(i, first+int64(n)*w, loose, nil)
	}
	t.tiersMu.Unlock()
	out := make([]*frozen, len(partsBySlot))
	for n, parts := range partsBySlot {
		out[n] = t.composite(i, first+int64(n)*w, parts)
	}
	return out
}

// Stats describes what a Tracker holds.
type Stats struct {
	K          int // tenants kept per bucket at most
	Buckets    int // buckets held, the open one included
	Entries    int // tenant entries over every bucket
	MaxEntries int // entries of the fullest bucket; never above K
}

// Stats reports what t holds now (beside the open bucket's 384 KiB sketch).
// It is for tests and monitoring; it takes the lock that decisions take,
// briefly.
func (t *Tracker) Stats() Stats {
	t.tiersMu.Lock()
	defer t.tiersMu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	s := Stats{K: t.k}
	add := func(n int) {
		s.Buckets++
		s.Entries += n
		s.MaxEntries = max(s.MaxEntries, n)
	}
	add(len(t.open.entries))
	for _, p := range t.pending {
		add(len(p.sum.entries))
	}
	for i := range t.tiers {
		if c := t.tiers[i].current; c != nil {
			add(len(c.records))
		}
		for _, b := range t.tiers[i].closed {
			add(len(b.records))
		}
	}
	return s
}

// floorTo rounds s down to a multiple of w.
func floorTo(s, w int64) int64 { return floorDiv(s, w) * w }

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// errClosed is what Close returns when called again.
var errClosed = errors.New("insights: the Tracker is closed")

// isNil reports whether v is nil or a nil pointer, map, func or the like
// inside an interface, which would panic on first use.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Slice, reflect.Interface:
		return rv.IsNil()
	}
	return false
}
