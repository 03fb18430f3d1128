package insights

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// MaxCandidates bounds the candidates one page or JSON answer lists.
const MaxCandidates = 200

// Handler returns an http.Handler that serves t's candidates as an HTML page
// (inline CSS and SVG, no external assets, no script) or, with
// ?format=json or an Accept header asking for application/json, as the
// JSON of a Report. Query parameters: window ("1h", "24h" (default) or
// "7d") and n (candidates to list, 1 to MaxCandidates, default
// DefaultCandidates). It answers GET and HEAD only, within about a second
// whatever the Exchange does (see Candidates).
//
// The page names tenants and their traffic: mount it behind the
// application's own authentication. Nothing is served unless the
// application mounts it.
func (t *Tracker) Handler() http.Handler {
	return &handler{t: t}
}

type handler struct{ t *Tracker }

//go:embed page.html
var pageSource string

var page = template.Must(template.New("page").Funcs(template.FuncMap{
	"num":         formatCount,
	"percent":     func(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" },
	"when":        func(t time.Time) string { return t.Format("Jan 2 15:04 UTC") },
	"whenExactly": func(t time.Time) string { return t.Format("Jan 2 15:04:05 UTC") },
	"iso":         func(t time.Time) string { return t.Format(time.RFC3339) },
	// net/http's patterns carry their method already ("GET /api/hello").
	"routeLabel": func(method, route string) string {
		if method == "" || strings.HasPrefix(route, method+" ") {
			return route
		}
		return method + " " + route
	},
}).Parse(pageSource))

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Vary", "Accept")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hdr.Set("Allow", "GET, HEAD")
		http.Error(w, "insights: only GET and HEAD", http.StatusMethodNotAllowed)
		return
	}
	q := r.URL.Query()
	asJSON, err := wantsJSON(q.Get("format"), r.Header.Get("Accept"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	win := LastDay
	if s := q.Get("window"); s != "" {
		if win, err = ParseWindow(s); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	n := DefaultCandidates
	if s := q.Get("n"); s != "" {
		if n, err = strconv.Atoi(s); err != nil || n < 1 || n > MaxCandidates {
			http.Error(w, fmt.Sprintf("insights: n must be 1 to %d, got %q", MaxCandidates, truncate(s, 40)), http.StatusBadRequest)
			return
		}
	}
	rep, err := h.t.Candidates(r.Context(), win, n)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if asJSON {
		hdr.Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
		return
	}
	hdr.Set("Content-Type", "text/html; charset=utf-8")
	// The page needs its own inline style and nothing else: no script,
	// no request to anywhere.
	hdr.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	hdr.Set("Referrer-Policy", "no-referrer")
	_ = page.Execute(w, h.t.view(rep, n))
}

// wantsJSON decides the format: ?format wins, then an Accept header that
// asks for JSON and not HTML.
func wantsJSON(format, accept string) (bool, error) {
	switch format {
	case "json":
		return true, nil
	case "html":
		return false, nil
	case "":
		return strings.Contains(accept, "application/json") && !strings.Contains(accept, "text/html"), nil
	}
	return false, fmt.Errorf("insights: format must be html or json, got %q", truncate(format, 40))
}

// The page's view of a Report.
type (
	pageView struct {
		Report
		Tabs     []tab
		JSONHref string
		Rows     []row
	}
	tab struct {
		Label, Href string
		On          bool
	}
	row struct {
		Rank int
		Candidate
		Verdict string // "upgrade", "fits", "beyond" or ""
		Chart   chart
	}
	chart struct {
		Width, Height int
		Max           int64
		Bars          []bar
		Label         string
	}
	bar struct {
		X, Y, W, H float64
		V          int64
		Start      time.Time
		Title      string
	}
)

var windowLabels = map[Window]string{LastHour: "Last hour", LastDay: "Last 24 hours", LastWeek: "Last 7 days"}

func (t *Tracker) view(rep Report, n int) pageView {
	v := pageView{Report: rep}
	for _, w := range Windows {
		v.Tabs = append(v.Tabs, tab{Label: windowLabels[w], Href: "?" + query(w, n, ""), On: w == rep.Window})
	}
	v.JSONHref = "?" + query(rep.Window, n, "json")
	rank := map[string]int{}
	for i, p := range t.plans {
		rank[p.Name] = i + 1
	}
	for i, c := range rep.Candidates {
		r := row{Rank: i + 1, Candidate: c, Chart: sparkline(c.Series, rep.Step)}
		switch {
		case c.OutgrowsPlans:
			r.Verdict = "beyond"
		case c.SuggestedPlan == "":
		case rank[c.SuggestedPlan] > rank[c.Plan]:
			r.Verdict = "upgrade"
		default:
			r.Verdict = "fits"
		}
		v.Rows = append(v.Rows, r)
	}
	return v
}

func query(w Window, n int, format string) string {
	q := url.Values{"window": {string(w)}}
	if n != DefaultCandidates {
		q.Set("n", strconv.Itoa(n))
	}
	if format != "" {
		q.Set("format", format)
	}
	return q.Encode()
}

// sparkline lays out one bar per point of s, scaled to the largest.
func sparkline(s []Point, step int64) chart {
	c := chart{Width: 200, Height: 40}
	for _, p := range s {
		c.Max = max(c.Max, p.Throttled)
	}
	if len(s) == 0 {
		return c
	}
	w := float64(c.Width) / float64(len(s))
	for i, p := range s {
		h := 1.0 // a baseline for empty buckets
		if c.Max > 0 && p.Throttled > 0 {
			h = max(2, float64(c.Height-2)*float64(p.Throttled)/float64(c.Max))
		}
		end := p.Start.Add(time.Duration(step) * time.Second)
		c.Bars = append(c.Bars, bar{
			X: round1(float64(i) * w), W: round1(max(w-1, 1)), Y: round1(float64(c.Height) - h), H: round1(h),
			V: p.Throttled, Start: p.Start,
			Title: fmt.Sprintf("%s throttled, %s to %s", formatCount(p.Throttled), p.Start.Format("Jan 2 15:04"), end.Format("15:04 UTC")),
		})
	}
	c.Label = fmt.Sprintf("throttled requests per %s, peak %s", time.Duration(step)*time.Second, formatCount(c.Max))
	return c
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }

// formatCount writes n with thousands separators.
func formatCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
