package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adaptertest"
	"github.com/tollgate-go/tollgate/core/storetest"
	"github.com/tollgate-go/tollgate/core/tollgatehttp"
)

// The plans of docs/plans.md's example: the example apps' trial plan, a
// burst of 10 at 5/s and 30 requests a UTC day, and the startup plan with
// the apps' reports budget, 50 tokens an hour.
var (
	reportsBudget = tollgate.Policy{Budget: "reports", Limit: tollgate.Limit{Rate: 50.0 / 3600, Burst: 50}}
	trial         = tollgate.Plan{Name: "trial", Limit: tollgate.Limit{Rate: 5, Burst: 10},
		Policies: []tollgate.Policy{{Quota: tollgate.Quota{Tokens: 30, Period: tollgate.Daily}}, reportsBudget}}
	startup = withPolicies(defaultPlan("startup"), reportsBudget)
)

func withPolicies(p tollgate.Plan, ps ...tollgate.Policy) tollgate.Plan {
	p.Policies = append(p.Policies, ps...)
	return p
}

// The client of the policies figure: a request every trialGap, ten a
// second, twice the trial's rate, for trialHorizon.
const (
	trialGap     = 100 * time.Millisecond
	trialHorizon = 8 * time.Second
)

// A call is one request of a simulation and what the client saw.
type call struct {
	at       time.Duration
	method   string
	path     string
	status   int
	denier   string // the policy that denied it, if any
	bucket   int64  // tokens left in the plan's bucket after it
	quota    int64  // tokens left in the daily quota after it
	header   http.Header
	decision tollgate.Decision
}

// simulate runs reqs (method, path, at) through the real Limiter and HTTP
// middleware, on the reference store and a manual clock that starts at a
// UTC midnight, for one tenant on plan p. POST requests are reports: 10
// tokens, from the reports budget too.
func simulate(p tollgate.Plan, reqs []call) []call {
	clock := storetest.NewClock()
	var last decisionCopy
	l, err := tollgate.New(storetest.NewModelStore(clock.Now), tollgate.SinglePlan(p),
		adaptertest.WithClock(clock.Now), tollgate.WithLogger(nil), tollgate.WithObserver(&last))
	if err != nil {
		panic(err)
	}
	ok := func(status int) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) })
	}
	get := tollgatehttp.Middleware(l)(ok(http.StatusOK))
	// The example apps answer a report 202.
	report := tollgatehttp.Middleware(l, tollgatehttp.WithCost(10), tollgatehttp.WithBudget("reports"))(ok(http.StatusAccepted))
	var elapsed time.Duration
	out := make([]call, 0, len(reqs))
	for _, s := range reqs {
		clock.Advance(s.at - elapsed)
		elapsed = s.at
		h := get
		if s.method == http.MethodPost {
			h = report
		}
		r := httptest.NewRequest(s.method, s.path, nil)
		r.Header.Set(tollgatehttp.DefaultTenantHeader, "t")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		s.status, s.header, s.decision = w.Code, w.Header(), last.d
		if s.status == http.StatusTooManyRequests {
			var body struct{ Policy string }
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				panic(err)
			}
			s.denier = body.Policy
		}
		for i, pol := range s.decision.Policies() {
			r := s.decision.Results()[i]
			switch {
			case pol.Name == p.Name:
				s.bucket = r.Remaining
			case !pol.Quota.IsZero() && pol.Budget == "":
				s.quota = r.Remaining
			}
		}
		out = append(out, s)
	}
	return out
}

// decisionCopy is an Observer that keeps a copy of the last decision.
type decisionCopy struct{ d tollgate.Decision }

func (c *decisionCopy) Observe(_ context.Context, d *tollgate.Decision) { c.d = *d }

// trialSteps is the figure's client: GET /api/hello every trialGap.
func trialSteps() []call {
	var reqs []call
	for t := time.Duration(0); t < trialHorizon; t += trialGap {
		reqs = append(reqs, call{at: t, method: http.MethodGet, path: "/api/hello"})
	}
	return simulate(trial, reqs)
}

// reportSteps is the budget example: six reports a second apart, then a
// GET.
func reportSteps() []call {
	var reqs []call
	for i := range 6 {
		reqs = append(reqs, call{at: time.Duration(i) * time.Second, method: http.MethodPost, path: "/api/reports"})
	}
	reqs = append(reqs, call{at: 6 * time.Second, method: http.MethodGet, path: "/api/hello"})
	return simulate(startup, reqs)
}

// The policies figure's geometry, in SVG user units.
const (
	pWidth, pHeight = 880.0, 560.0
	pLeft, pRight   = 80.0, 850.0
	pTop, pBottom   = 80.0, 330.0
	pYMax           = 30
	pRowSent        = 380.0
	pRowAllowed     = 410.0
	pRowBucket      = 440.0
	pRowQuota       = 470.0

	colourQuota = "#7b3fa0"
)

func px(t time.Duration) float64 { return pLeft + (pRight-pLeft)*t.Seconds()/trialHorizon.Seconds() }
func py(n int64) float64         { return pBottom - (pBottom-pTop)*float64(n)/pYMax }

// renderPolicies writes the SVG of the trial plan's two policies under a
// client that asks for twice the rate.
func renderPolicies(w io.Writer) error {
	steps := trialSteps()
	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }

	var lastAllowed, firstDaily call
	for _, s := range steps {
		if s.denier == "" {
			lastAllowed = s
		}
		if firstDaily.status == 0 && s.denier == "trial-daily" {
			firstDaily = s
		}
	}

	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="13">`,
		pWidth, pHeight, pWidth, pHeight)
	p(`<title>A rate and a quota: the trial plan's token bucket and daily quota under a client sending 10 requests a second</title>`)
	p(`<rect width="100%%" height="100%%" fill="#ffffff"/>`)
	p(`<text x="%.0f" y="28" font-size="17" font-weight="bold">A rate refills, a quota does not: the trial plan under 10 requests a second</text>`, pLeft)
	p(`<text x="%.0f" y="50" fill="#444">token bucket "trial": %v. daily quota "trial-daily": %d a UTC day. The day starts at 0 s.</text>`,
		pLeft, trial.Limit, trial.Policies[0].Quota.Tokens)

	// Grid and axes.
	for n := int64(0); n <= pYMax; n += 5 {
		p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e3e3e3"/>`, pLeft, py(n), pRight, py(n))
		p(`<text x="%.1f" y="%.1f" text-anchor="end" fill="#444">%d</text>`, pLeft-8, py(n)+4, n)
	}
	for s := time.Duration(0); s <= trialHorizon; s += time.Second {
		p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e3e3e3"/>`, px(s), pTop, px(s), pBottom)
		p(`<text x="%.1f" y="%.1f" text-anchor="middle" fill="#444">%d s</text>`, px(s), pBottom+18, int(s.Seconds()))
	}
	p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#444"/>`, pLeft, pBottom, pRight, pBottom)
	p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#444"/>`, pLeft, pTop, pLeft, pBottom)
	p(`<text transform="translate(24 %.1f) rotate(-90)" text-anchor="middle" fill="#444">tokens left after each request</text>`, (pTop+pBottom)/2)

	// Tokens left in each policy, as steps.
	line := func(colour string, left func(call) int64, start int64) {
		pts := fmt.Sprintf("%.1f,%.1f", px(0), py(start))
		prev := start
		for _, s := range steps {
			n := left(s)
			pts += fmt.Sprintf(" %.1f,%.1f %.1f,%.1f", px(s.at), py(prev), px(s.at), py(n))
			prev = n
		}
		pts += fmt.Sprintf(" %.1f,%.1f", px(trialHorizon), py(prev))
		p(`<polyline points="%s" fill="none" stroke="%s" stroke-width="2.5" stroke-linejoin="round"/>`, pts, colour)
	}
	line(colourBucket, func(s call) int64 { return s.bucket }, trial.Limit.Burst)
	line(colourQuota, func(s call) int64 { return s.quota }, trial.Policies[0].Quota.Tokens)

	// Legend.
	lx, ly := px(2*time.Second), pTop+18
	p(`<rect x="%.1f" y="%.1f" width="330" height="50" fill="#ffffff" stroke="#cccccc"/>`, lx-8, ly-14)
	p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`, lx, ly-4, lx+24, ly-4, colourQuota)
	p(`<text x="%.1f" y="%.1f">daily quota: 30, back at the next UTC midnight</text>`, lx+32, ly)
	p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`, lx, ly+18, lx+24, ly+18, colourBucket)
	p(`<text x="%.1f" y="%.1f">token bucket: 10, a token back every 200 ms</text>`, lx+32, ly+22)

	// Annotations.
	p(`<text x="%.1f" y="%.1f" fill="%s">the burst of 10, then 5 a second</text>`, px(2*time.Second), py(13), colourBucket)
	ra := firstDaily.header.Get("Retry-After")
	p(`<text x="%.1f" y="%.1f" fill="%s" font-weight="bold">request %d, at %v: the day's 30 are spent</text>`,
		px(firstDaily.at)+8, py(19), colourQuota, indexOf(steps, firstDaily)+1, firstDaily.at)
	p(`<text x="%.1f" y="%.1f" fill="%s">429, Retry-After: %s (the next midnight);</text>`, px(firstDaily.at)+8, py(19)+18, colourQuota, ra)
	p(`<text x="%.1f" y="%.1f" fill="%s">the bucket refills, and no request passes</text>`, px(firstDaily.at)+8, py(19)+36, colourQuota)
	p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="5 4"/>`,
		px(lastAllowed.at), pTop, px(lastAllowed.at), pRowQuota+12, colourQuota)

	// The raster: every request, and which policy denied it.
	ticks := func(row float64, colour string, keep func(call) bool) {
		for _, s := range steps {
			if keep(s) {
				p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5"/>`, px(s.at), row-9, px(s.at), row+9, colour)
			}
		}
	}
	p(`<text x="%.1f" y="%.1f" text-anchor="end" fill="#444">sent</text>`, pLeft-8, pRowSent+4)
	p(`<text x="%.1f" y="%.1f" text-anchor="end" fill="#2a7d2a">200</text>`, pLeft-8, pRowAllowed+4)
	p(`<text x="%.1f" y="%.1f" text-anchor="end" fill="%s">429 rate</text>`, pLeft-8, pRowBucket+4, colourBucket)
	p(`<text x="%.1f" y="%.1f" text-anchor="end" fill="%s">429 quota</text>`, pLeft-8, pRowQuota+4, colourQuota)
	ticks(pRowSent, colourGrey, func(call) bool { return true })
	ticks(pRowAllowed, "#2a7d2a", func(s call) bool { return s.denier == "" })
	ticks(pRowBucket, colourBucket, func(s call) bool { return s.denier == trial.Name })
	ticks(pRowQuota, colourQuota, func(s call) bool { return s.denier == "trial-daily" })
	p(`<text x="%.1f" y="%.1f" font-size="12" fill="#444">Each tick is one GET, %v apart. Until the quota is spent, the bucket denies what exceeds 5 a second, for 200 ms at most;</text>`,
		pLeft, pRowQuota+38, trialGap)
	p(`<text x="%.1f" y="%.1f" font-size="12" fill="#444">a denied request takes from neither policy. Then the quota denies every request, whatever the bucket holds, until the day ends.</text>`,
		pLeft, pRowQuota+56)
	p(`</svg>`)
	_, err := w.Write(b.Bytes())
	return err
}

func indexOf(steps []call, s call) int {
	for i := range steps {
		if steps[i].at == s.at {
			return i
		}
	}
	return -1
}

// headerTables returns the Markdown tables of docs/plans.md: the headers a
// client sees at each call of the trial's day and of the reports budget.
func headerTables() string {
	var b strings.Builder
	row := func(n int, s call) {
		body := ""
		if s.denier != "" {
			body = fmt.Sprintf("`%q`", s.denier)
		}
		fmt.Fprintf(&b, "| %d | %v | %s %s | %d | `%s` | %s / %s | %s | %s |\n", n, s.at, s.method, s.path, s.status,
			s.header.Get("RateLimit"), s.header.Get("X-RateLimit-Remaining"), s.header.Get("X-RateLimit-Limit"),
			dash(s.header.Get("Retry-After")), dash(body))
	}
	head := "| # | time | request | status | `RateLimit` | `X-RateLimit-Remaining` / `-Limit` | `Retry-After` | body's `policy` |\n|---:|---:|---|---:|---|---|---:|---|\n"

	steps := trialSteps()
	fmt.Fprintf(&b, "Tenant on `trial`, one GET every %v from midnight UTC; every response carries\n`RateLimit-Policy: %s`.\n\n", trialGap, steps[0].header.Get("RateLimit-Policy"))
	b.WriteString(head)
	// The first request, the burst's last, the first denial by the bucket
	// and the request after it, the day's last allowed request, the first
	// denial by the quota, and the last request.
	shown := []int{0, 9}
	lastAllowed := 0
	for i, s := range steps {
		if s.denier == "" {
			lastAllowed = i
		}
	}
	seen := map[string]bool{"": true}
	for i := 1; i < len(steps); i++ {
		if !seen[steps[i].denier] {
			seen[steps[i].denier] = true
			shown = append(shown, i)
			if steps[i].denier == trial.Name {
				shown = append(shown, i+1)
			} else {
				shown = append(shown[:len(shown)-1], lastAllowed, i)
			}
		}
	}
	shown = append(shown, len(steps)-1)
	last := -1
	for _, i := range shown {
		if i <= last {
			continue
		}
		if last >= 0 && i > last+1 {
			b.WriteString("| ... | | | | | | | |\n")
		}
		row(i+1, steps[i])
		last = i
	}

	reports := reportSteps()
	fmt.Fprintf(&b, "\nTenant on `startup` with the reports budget, a report (10 tokens) every second, then a GET;\nreports carry `RateLimit-Policy: %s`.\n\n", reports[0].header.Get("RateLimit-Policy"))
	b.WriteString(head)
	for i, s := range reports {
		row(i+1, s)
	}
	return b.String()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
