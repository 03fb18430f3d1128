package admin

import (
	_ "embed"
	"errors"
	"fmt"
	"html/template"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/insights"
)

//go:embed page.html
var pageSource string

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"shown": insights.Shown,
	"num":   formatCount,
	"when":  func(t time.Time) string { return t.UTC().Format("Jan 2 15:04:05 UTC") },
	"iso":   func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
}).Parse(pageSource))

// The page's forms post these fields, and no others.
var formFields = []string{"csrf", "action", "tenant", "plan", "for", "reason"}

// The page's view.
type (
	pageView struct {
		Label, CSRF    string
		Notice, Error  string
		Tabs           []tab
		JSONHref       string
		Tracking       bool
		Report         insights.Report
		Candidates     []candidateRow
		Overrides      []overrideRow
		Changes        []changeRow
		Tenant         *tenantView
		FormAction     string // where the forms post: the tenant's view, or the page
		Plans          []string
		ChangesShown   int
		ChangesTotal   int
		OverridesError string
	}
	tab struct {
		Label, Href string
		On          bool
	}
	candidateRow struct {
		Rank int
		insights.Candidate
		Href string
	}
	overrideRow struct {
		overrideJSON
		Href, What string
	}
	changeRow struct {
		changeJSON
		Href, What string
	}
	tenantView struct {
		tenantState
		What string // of its override
	}
)

// changesShown is how many of the latest changes the page lists.
const changesShown = 20

var windowLabels = map[insights.Window]string{insights.LastHour: "Last hour", insights.LastDay: "Last 24 hours", insights.LastWeek: "Last 7 days"}

// pageJSON is the page as JSON: the candidates' Report, as the insights
// page gives it, with the overrides and the latest changes.
type pageJSON struct {
	*insights.Report
	Overrides []overrideJSON `json:"overrides"`
	Changes   []changeJSON   `json:"changes"`
}

func (h *handler) page(w http.ResponseWriter, r *http.Request, c credential) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		h.showPage(w, r, c, http.StatusOK, "")
	case http.MethodPost:
		h.pageChange(w, r, c)
	default:
		allow(w, r, http.MethodGet, http.MethodPost)
	}
}

// showPage renders the page, with failure as its error, or its JSON.
func (h *handler) showPage(w http.ResponseWriter, r *http.Request, c credential, status int, failure string) {
	ctx := r.Context()
	q := r.URL.Query()
	w.Header().Set("Vary", "Accept")
	asJSON, err := wantsJSON(q.Get("format"), r.Header.Get("Accept"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	win, n, err := window(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	var rep *insights.Report
	if h.tracker != nil {
		got, err := h.tracker.Candidates(ctx, win, n)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		rep = &got
	}
	overrides, errO := h.overrides(ctx)
	changes, errC := h.changes(ctx)
	if asJSON {
		if err := errors.Join(errO, errC); err != nil {
			h.failed(w, err)
			return
		}
		writeJSON(w, status, pageJSON{Report: rep, Overrides: overrides, Changes: changes})
		return
	}

	v := pageView{Label: c.label, CSRF: c.csrf, Error: failure, Tracking: rep != nil, FormAction: "?"}
	if err := errors.Join(errO, errC); err != nil {
		v.OverridesError = "the rate limiter's store failed: " + err.Error()
	}
	plans := map[string]bool{}
	if rep != nil {
		v.Report = *rep
		for _, wi := range insights.Windows {
			v.Tabs = append(v.Tabs, tab{Label: windowLabels[wi], Href: "?" + pageQuery(wi, n, ""), On: wi == rep.Window})
		}
		v.JSONHref = "?" + pageQuery(rep.Window, n, "json")
		for i, cand := range rep.Candidates {
			v.Candidates = append(v.Candidates, candidateRow{Rank: i + 1, Candidate: cand, Href: tenantHref(unshown(cand.Tenant))})
			plans[cand.Plan], plans[cand.SuggestedPlan] = true, true
		}
	} else {
		v.JSONHref = "?format=json"
	}
	for _, o := range overrides {
		v.Overrides = append(v.Overrides, overrideRow{overrideJSON: o, Href: tenantHref(o.Tenant), What: describe(o.Plan, o.Limits)})
		plans[o.Plan] = true
	}
	v.ChangesTotal = len(changes)
	for _, ch := range changes[:min(len(changes), changesShown)] {
		what := describe(ch.Plan, ch.Limits)
		if ch.Action == "reset" {
			what = "every policy full again"
		}
		v.Changes = append(v.Changes, changeRow{changeJSON: ch, Href: tenantHref(ch.Tenant), What: what})
		plans[ch.Plan] = true
	}
	v.ChangesShown = len(v.Changes)
	if tenant := q.Get("tenant"); tenant != "" {
		v.FormAction = tenantHref(tenant)
		st, err := h.state(ctx, tenant)
		if err != nil {
			v.Error = strings.TrimSpace(v.Error + " " + err.Error())
			if status == http.StatusOK && isRequestMistake(err) {
				status = http.StatusBadRequest
			}
		} else {
			tv := &tenantView{tenantState: st}
			if st.Override != nil {
				tv.What = describe(st.Override.Plan, st.Override.Limits)
			}
			v.Tenant = tv
			plans[strings.TrimSuffix(st.Plan, overrideSuffix)] = true
		}
		v.Notice = notices[q.Get("done")]
	}
	for p := range plans {
		if p != "" && !strings.ContainsAny(p, `"+`) {
			v.Plans = append(v.Plans, p)
		}
	}
	slices.Sort(v.Plans)

	hdr := w.Header()
	hdr.Set("Content-Type", "text/html; charset=utf-8")
	// Inline style and forms that post to the page itself: no script, no
	// request to anywhere else, no framing by another page.
	hdr.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	hdr.Set("X-Frame-Options", "DENY")
	w.WriteHeader(status)
	_ = pageTemplate.Execute(w, v)
}

var notices = map[string]string{
	"reset":    "Reset: every policy of this tenant is full again, on every replica.",
	"override": "Override set: this replica applies it now, every other replica within about 50 ms.",
	"clear":    "Override cleared: the tenant is back on its own plan, with what it has spent.",
}

// pageChange applies a change posted by one of the page's forms, and sends
// the browser to the tenant's view (post, redirect, get: a reload does not
// post again).
func (h *handler) pageChange(w http.ResponseWriter, r *http.Request, c credential) {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/x-www-form-urlencoded" {
		writeError(w, http.StatusUnsupportedMediaType, "the page's forms post application/x-www-form-urlencoded; scripts use the JSON API under api/")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	if err := r.ParseForm(); err != nil {
		writeError(w, http.StatusBadRequest, "the form can not be read: "+err.Error())
		return
	}
	f := r.PostForm
	for k, vs := range f {
		if !slices.Contains(formFields, k) || len(vs) > 1 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("the form has an unknown or repeated field %q", truncate(k, 40)))
			return
		}
	}
	if !h.checkChange(w, r, c, f.Get("csrf")) {
		return
	}
	tenant := f.Get("tenant")
	if !f.Has("tenant") {
		// The tenant's view posts its forms to itself: the tenant ID is
		// in the URL, byte for byte, whatever it holds.
		tenant = r.URL.Query().Get("tenant")
	}
	action := f.Get("action")
	ch := tollgate.Change{Tenant: tenant, Action: action, Reason: f.Get("reason"), By: c.label}
	var err error
	switch action {
	case "reset", "clear":
	case "override":
		var d time.Duration
		if d, err = parseExpiry(f.Get("for")); err == nil {
			ch, err = h.overrideChange(r.Context(), tenant, strings.TrimSpace(f.Get("plan")), nil, d, ch.Reason, c)
		}
	default:
		err = requestError{fmt.Errorf("action must be reset, override or clear, got %q", truncate(action, 40))}
	}
	if err == nil {
		err = h.apply(r.Context(), ch)
	}
	if err != nil {
		if !strings.Contains(r.Header.Get("Accept"), "text/html") {
			h.failed(w, err)
			return
		}
		status := http.StatusBadRequest
		if !isRequestMistake(err) {
			status = http.StatusServiceUnavailable
		}
		h.showPage(w, r, c, status, "The change was not made: "+err.Error())
		return
	}
	w.Header().Set("Location", tenantHref(tenant)+"&done="+action)
	w.WriteHeader(http.StatusSeeOther)
}

func isRequestMistake(err error) bool {
	return errors.As(err, new(requestError)) || errors.Is(err, tollgate.ErrUnknownPlan) ||
		errors.Is(err, tollgate.ErrInvalidLimit) || errors.Is(err, tollgate.ErrInvalidTenant)
}

// parseExpiry reads the page's "for" field: a duration such as 90m or 48h,
// or a number of days such as 3d; empty, the override does not expire.
func parseExpiry(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	var d time.Duration
	var err error
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n int64
		if n, err = strconv.ParseInt(days, 10, 64); err == nil && n > 0 && n <= int64(maxExpiry/(24*time.Hour)) {
			d = time.Duration(n) * 24 * time.Hour
		}
	} else {
		d, err = time.ParseDuration(s)
	}
	if err != nil || d <= 0 || d > maxExpiry {
		return 0, requestError{fmt.Errorf("for: want a duration such as 90m, 48h or 3d (at most %d days), or nothing for no expiry; got %q",
			int(maxExpiry/(24*time.Hour)), truncate(s, 40))}
	}
	return d, nil
}

// wantsJSON decides the page's format as the insights page does: ?format
// wins, then an Accept header that asks for JSON and not HTML.
func wantsJSON(format, accept string) (bool, error) {
	switch format {
	case "json":
		return true, nil
	case "html":
		return false, nil
	case "":
		return strings.Contains(accept, "application/json") && !strings.Contains(accept, "text/html"), nil
	}
	return false, fmt.Errorf("format must be html or json, got %q", truncate(format, 40))
}

func pageQuery(w insights.Window, n int, format string) string {
	q := url.Values{"window": {string(w)}}
	if n != insights.DefaultCandidates {
		q.Set("n", strconv.Itoa(n))
	}
	if format != "" {
		q.Set("format", format)
	}
	return q.Encode()
}

// tenantHref links to tenant's view; the query escapes every byte of the
// ID, so that one that is not UTF-8 arrives as it is.
func tenantHref(tenant string) string {
	return "?tenant=" + url.QueryEscape(tenant)
}

// unshown returns the tenant ID that insights.Shown showed as s: a quoted
// name is always one that Shown quoted.
func unshown(s string) string {
	if strings.HasPrefix(s, `"`) {
		if raw, err := strconv.Unquote(s); err == nil {
			return raw
		}
	}
	return s
}

// describe says what an override gives.
func describe(plan string, limits []limitJSON) string {
	var parts []string
	if plan != "" {
		parts = append(parts, "plan "+plan)
	}
	for _, l := range limits {
		if l.Tokens != 0 {
			parts = append(parts, fmt.Sprintf("%s: %s tokens", l.Name, formatCount(l.Tokens)))
		} else {
			parts = append(parts, fmt.Sprintf("%s: %s burst at %g/s", l.Name, formatCount(l.Burst), l.Rate))
		}
	}
	return strings.Join(parts, "; ")
}

// formatCount writes n with thousands separators.
func formatCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	sign := ""
	if s[0] == '-' {
		sign, s = "-", s[1:]
	}
	var b strings.Builder
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteByte(s[i])
	}
	return sign + b.String()
}
