package insights

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// A Window is the period a report covers, ending now.
type Window string

// The windows a Tracker reports on. Each is made of whole buckets: the
// bucket in progress and the 12 five-minute, 24 hourly or 28 six-hour
// buckets before it, so it reaches back at least as far as its name says
// and at most one bucket further.
const (
	LastHour Window = "1h"
	LastDay  Window = "24h"
	LastWeek Window = "7d"
)

// Windows lists the windows, shortest first.
var Windows = []Window{LastHour, LastDay, LastWeek}

// tier returns the tier a window reads, or -1.
func (w Window) tier() int {
	switch w {
	case LastHour:
		return 0
	case LastDay:
		return 1
	case LastWeek:
		return 2
	}
	return -1
}

// ParseWindow returns the window named s: "1h", "24h" or "7d".
func ParseWindow(s string) (Window, error) {
	if w := Window(s); w.tier() >= 0 {
		return w, nil
	}
	return "", fmt.Errorf("insights: window must be 1h, 24h or 7d, got %q", truncate(s, 40))
}

// Step returns the width of the window's buckets: one point of a
// Candidate's Series.
func (w Window) Step() time.Duration {
	if i := w.tier(); i >= 0 {
		return time.Duration(tiers[i].width) * time.Second
	}
	return 0
}

// A Report lists the upgrade candidates of a window, heaviest first.
type Report struct {
	Window Window    `json:"window"`
	From   time.Time `json:"from"` // the start of the oldest bucket
	To     time.Time `json:"to"`   // now
	Step   int64     `json:"step_seconds"`

	// Fleet reports that the candidates are those of every replica that
	// publishes to the Exchange (Replicas names them); false, they are
	// this process's own.
	Fleet    bool     `json:"fleet"`
	Replicas []string `json:"replicas,omitempty"`
	// Stale reports that the Exchange did not answer this report in time:
	// the other replicas' counts are those it gave at FleetAsOf, this
	// replica's are current.
	Stale     bool      `json:"stale,omitempty"`
	FleetAsOf time.Time `json:"fleet_as_of,omitzero"`
	// FleetError says why a Tracker with an Exchange reports stale counts,
	// or its own candidates only.
	FleetError string `json:"fleet_error,omitempty"`

	K         int     `json:"k"`          // tenants kept per bucket
	NearLimit float64 `json:"near_limit"` // see WithNearLimit

	// ThrottledTokens is every throttled token in the window, tracked
	// tenants or not.
	ThrottledTokens int64 `json:"throttled_tokens"`

	Candidates []Candidate `json:"candidates"`
}

// A Candidate is a tenant that hit its limits in the window.
//
// Its names (tenant, plan, methods and routes) are shown as they are,
// unless one holds invalid UTF-8 or a character that is not graphic (a
// bidirectional control such as U+202E, a zero-width space), or starts
// with a double quote: then it is quoted as Go quotes it
// (strconv.QuoteToGraphic), `"tenant-\xff"`, so that the page shows what
// the ID is, not what it makes a browser draw, and distinct tenants stay
// distinct.
type Candidate struct {
	Tenant string `json:"tenant"`
	Plan   string `json:"plan"` // the plan of its latest request

	// SuggestedPlan is the smallest known plan (see WithPlans) whose token
	// bucket would have allowed every request of the tenant that the
	// tracker saw, replayed on it, and holds its peaks. It may be the
	// tenant's own plan, when the throttling came from another of its
	// policies (a quota, a budget). It is "" when no plan is known or none
	// is large enough; OutgrowsPlans then tells which.
	SuggestedPlan string `json:"suggested_plan,omitempty"`
	OutgrowsPlans bool   `json:"outgrows_plans,omitempty"`

	// ThrottledTokens ranks the candidates: the tokens of its throttled
	// requests, over-estimated by at most Overcount (the price of keeping
	// k tenants per bucket; 0 when the tenant was tracked from its first
	// throttled request in every bucket).
	ThrottledTokens int64 `json:"throttled_tokens"`
	Overcount       int64 `json:"overcount"`

	// The tenant's requests: every one, those throttled (denied or
	// shadow-denied), those shadow-denied, and the allowed ones that left
	// at most the near-limit share of a limit. Throttled ones are counted
	// exactly; the others before the tenant's first throttled request in
	// a bucket come from a sketch, which may over-state them slightly.
	Requests          int64   `json:"requests"`
	ThrottledRequests int64   `json:"throttled_requests"`
	ShadowDenied      int64   `json:"shadow_denied_requests"`
	NearLimitRequests int64   `json:"near_limit_requests"`
	ThrottledShare    float64 `json:"throttled_share"` // ThrottledRequests / Requests

	// InFlightRefusals is how many of the throttled requests were refused
	// for want of a slot of an in-flight policy (tollgate.Policy.InFlight):
	// the tenant ran too many requests at once rather than too many in
	// all. A request that waited for a slot in the delay mode counts once
	// for each time it was turned away.
	InFlightRefusals int64 `json:"inflight_refusals"`

	// The most tokens the tenant asked for in one clock second and one
	// clock minute, whether allowed or not; summed over the replicas.
	PeakTokensPerSecond int64 `json:"peak_tokens_per_second"`
	PeakTokensPerMinute int64 `json:"peak_tokens_per_minute"`

	Routes    []RouteCount `json:"routes"` // where it was throttled, most first; at most four
	FirstSeen time.Time    `json:"first_seen"`
	LastSeen  time.Time    `json:"last_seen"`

	// Series is the throttled requests per bucket of the window, oldest
	// first: one point per Step.
	Series []Point `json:"series"`
}

// A RouteCount is a route and the throttled requests on it.
type RouteCount struct {
	Method    string `json:"method"`
	Route     string `json:"route"`
	Throttled int64  `json:"throttled"`
}

// A Point is one bucket of a Candidate's Series.
type Point struct {
	Start     time.Time `json:"start"`
	Throttled int64     `json:"throttled"`
}

// DefaultCandidates is how many candidates a report lists unless told.
const DefaultCandidates = 20

// Candidates reports the at most n heaviest candidates of window w (n <= 0
// means DefaultCandidates): those of the whole fleet with an Exchange. It
// waits for the Exchange at most a second: then, or if the Exchange fails,
// it reports the other replicas' counts of the Exchange's last answer with
// this replica's current ones, marked Stale, or this replica's own if the
// Exchange never answered, with the error in Report.FleetError. It errs
// only on an unknown window.
func (t *Tracker) Candidates(ctx context.Context, w Window, n int) (Report, error) {
	i := w.tier()
	if i < 0 {
		_, err := ParseWindow(string(w))
		return Report{}, err
	}
	if n <= 0 {
		n = DefaultCandidates
	}
	now := t.now()
	width := tiers[i].width
	last := floorTo(now.Unix(), width)
	first := last - int64(tiers[i].keep)*width
	rep := Report{Window: w, From: time.Unix(first, 0).UTC(), To: now.UTC(), Step: width, K: t.k, NearLimit: t.nearLimit}

	slots := t.localSlots(i, first, last)
	if t.exchange != nil {
		read := t.fleetSlots(ctx, i, first, last, now, slots)
		if read.slots != nil {
			slots, rep.Fleet, rep.Replicas = read.slots, true, read.replicas
			rep.Stale, rep.FleetAsOf = read.stale, read.asOf.UTC()
		}
		if read.err != nil {
			rep.FleetError = read.err.Error()
		}
	}
	whole := merge(slots, t.k, first, last+width-first, overTime)
	rep.ThrottledTokens = whole.total
	top := whole.records[:min(n, len(whole.records))]
	rep.Candidates = make([]Candidate, len(top))
	row := make(map[string]int, len(top))
	for j := range top {
		rep.Candidates[j] = t.candidate(&top[j], first, width, len(slots))
		row[top[j].tenant] = j
	}
	for s, b := range slots {
		if b == nil {
			continue
		}
		for r := range b.records {
			if j, ok := row[b.records[r].tenant]; ok {
				rep.Candidates[j].Series[s].Throttled = b.records[r].throttled
			}
		}
	}
	return rep, nil
}

func (t *Tracker) candidate(r *record, first, width int64, points int) Candidate {
	c := Candidate{
		Tenant:              shown(r.tenant),
		Plan:                shown(r.plan),
		ThrottledTokens:     r.weight,
		Overcount:           r.overcount,
		Requests:            r.requests,
		ThrottledRequests:   r.throttled,
		ShadowDenied:        r.shadow,
		InFlightRefusals:    r.inFlight,
		NearLimitRequests:   r.near,
		PeakTokensPerSecond: r.peakSecond,
		PeakTokensPerMinute: r.peakMinute,
		FirstSeen:           time.Unix(0, r.first).UTC(),
		LastSeen:            time.Unix(0, r.last).UTC(),
		Routes:              make([]RouteCount, len(r.routes)),
		Series:              make([]Point, points),
	}
	if r.requests > 0 {
		c.ThrottledShare = float64(r.throttled) / float64(r.requests)
	}
	for i, rt := range r.routes {
		c.Routes[i] = RouteCount{Method: shown(rt.method), Route: shown(rt.route), Throttled: rt.throttled}
	}
	for i := range c.Series {
		c.Series[i].Start = time.Unix(first+int64(i)*width, 0).UTC()
	}
	if len(t.plans) > 0 {
		if i := t.suggest(r); i < len(t.plans) {
			c.SuggestedPlan = t.plans[i].Name
		} else {
			c.OutgrowsPlans = true
		}
	}
	return c
}

// suggest returns the index in t.plans of the smallest plan that would have
// served r, or len(t.plans) if none would have. Two tests must pass, and
// the larger plan they give wins:
//
//   - replay: every request the tenant made while tracked, replayed on
//     each plan's token bucket, would have been allowed (record.fit). It
//     sees bursts to the request, but on one replica: where replicas share
//     a tenant, each replays only its own part.
//   - peaks: the plan's bucket, full at the start, holds the most tokens
//     asked for in one second (burst plus a second of refill) and in one
//     minute (burst plus a minute of refill). Across replicas the peaks
//     add up, so this test sees the whole fleet's demand.
func (t *Tracker) suggest(r *record) int {
	i := 0
	for i < len(t.plans) && !holds(t.plans[i], r.peakSecond, r.peakMinute) {
		i++
	}
	if r.fit >= 0 {
		i = max(i, int(min(r.fit, int64(len(t.plans)))))
	}
	return i
}

// holds reports whether p's token bucket, full at the start, holds the
// peaks.
func holds(p tollgate.Plan, perSecond, perMinute int64) bool {
	b, r := float64(p.Limit.Burst), p.Limit.Rate
	return b+r >= float64(perSecond) && b+60*r >= float64(perMinute)
}

// Shown returns a name (a tenant ID, a plan, a route) as a Candidate shows
// it: as it is, or quoted as strconv.QuoteToGraphic quotes it if it holds
// invalid UTF-8 or a rune that is not graphic, or starts with a double
// quote. Other pages that list tenants show them by the same rule.
func Shown(s string) string { return shown(s) }

// shown returns a name as a Candidate shows it: as it is, or quoted if it
// holds invalid UTF-8 or a rune that is not graphic, or starts with a
// double quote, which a name shown as it is never does. So no two names
// are shown alike.
func shown(s string) string {
	if strings.HasPrefix(s, `"`) {
		return strconv.QuoteToGraphic(s)
	}
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsGraphic(r) {
			return strconv.QuoteToGraphic(s)
		}
	}
	return s
}

// truncate shortens s for an error message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
