package insights_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/tollgatehttp"
	"github.com/tollgate-go/tollgate/insights"
)

var screenshot = flag.String("screenshot", "", "write a PNG of the insights page to this file (docs/img/insights.png)")

// chromium returns the path of a Chromium (or Chrome) to drive, or skips the
// test where none is installed: .ci/run installs the Debian package
// chromium, so CI never skips.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no Chromium on this machine (install the Debian package chromium, as .ci/run does, or set CHROMIUM): the browser test did not run"
	if os.Getenv("TOLLGATE_CI") != "" {
		t.Fatal(msg) // CI installs the tool: a skip there would hide the test
	}
	t.Skip(msg)
	return ""
}

// adminOnly answers 401 to a request without the bearer token, as the
// example apps mount the page.
func adminOnly(token string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tollgate"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// pageWidth is the width of the browser's window: the page must fit it.
const pageWidth = 1280

// newInFlightLimiter returns a Limiter that tells tr of its decisions, on
// whose plans every tenant may have slots requests in flight.
func newInFlightLimiter(t *testing.T, c *clock, tr *insights.Tracker, slots int64) *tollgate.Limiter {
	t.Helper()
	plans := tollgate.DefaultPlans()
	for i := range plans {
		plans[i].Policies = append(plans[i].Policies, tollgate.Policy{InFlight: slots})
	}
	resolver, err := tollgate.NewStaticResolver(plans, "free", nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tollgate.New(newModelStore(c), resolver, tollgate.WithObserver(tr), tollgate.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A row is what the browser shows of one candidate.
type browserRow struct {
	Tenant, Plan, Suggested string
	Throttled, InFlight     int64
	InFlightCell            string    // the text of the In flight cell
	Bars                    []int64   // data-v of the chart's bars
	Heights                 []float64 // as laid out
	ChartWidth              float64
}

func TestInsightsPageInChromium(t *testing.T) {
	exe := chromium(t)
	start := monday.Add(-24 * time.Hour)
	c := newClock(start)
	tr := newTracker(t, c)

	// A day of traffic, an hour at a time, each hour on fresh buckets:
	// initech runs over its startup burst now and then, globex over its
	// growth burst twice, and loopy, quiet all day, starts looping in
	// the last hours.
	for h := range 24 {
		c.set(start.Add(time.Duration(h)*time.Hour + 7*time.Minute))
		l := newLimiter(t, c, tr)
		flood(t, l, "initech", "GET /api/hello", 1, 100+(h%5)*9)
		if h == 9 || h == 15 {
			flood(t, l, "globex", "POST /api/reports", 10, 55)
		}
		if h%6 == 2 {
			flood(t, l, "hooli", "GET /api/hello", 1, 26)
		}
		if h >= 22 {
			flood(t, l, "loopy", "GET /api/hello", 1, 150*(h-20))
		}
	}

	// The scripted flood, through HTTP, in the current hour.
	c.set(monday)
	l := newLimiter(t, c, tr)
	const token = "s3cret"
	mux := http.NewServeMux()
	mux.Handle("GET /api/hello", tollgatehttp.Middleware(l)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, `{"hello":"world"}`)
	})))
	mux.Handle("/admin/tollgate", adminOnly(token, tr.Handler()))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	var throttled int
	for range 400 {
		resp, _ := get(t, srv.URL+"/api/hello", "X-Tenant-ID", "loopy")
		if resp.StatusCode == http.StatusTooManyRequests {
			throttled++
		}
	}
	if throttled < 370 {
		t.Fatalf("the flood got %d 429s of 400", throttled)
	}
	// exporter runs two long exports at once, all its plan allows in
	// flight, and asks for 30 more meanwhile.
	const overCap = 30
	lf := newInFlightLimiter(t, c, tr, 2)
	var exports []tollgate.Decision
	for range 2 {
		d, err := lf.Take(context.Background(), tollgate.Request{Tenant: "exporter", Method: "GET", Route: "GET /api/export"})
		if err != nil || !d.Allowed {
			t.Fatalf("an export: %+v, %v", d, err)
		}
		exports = append(exports, d)
	}
	if got := flood(t, lf, "exporter", "GET /api/export", 1, overCap); got.throttled != overCap {
		t.Fatalf("%d of %d refused with two exports running", got.throttled, overCap)
	}
	for i := range exports {
		_ = lf.Release(context.Background(), &exports[i])
	}
	if resp, _ := get(t, srv.URL+"/admin/tollgate"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the page without a token: %d", resp.StatusCode)
	}

	_, body := get(t, srv.URL+"/admin/tollgate?format=json", "Authorization", "Bearer "+token)
	var rep insights.Report
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Candidates) < 5 || rep.Candidates[0].Tenant != "loopy" || rep.Candidates[0].SuggestedPlan != "growth" {
		t.Fatalf("JSON: %+v", rep.Candidates)
	}
	inFlight := map[string]int64{}
	for _, c := range rep.Candidates {
		inFlight[c.Tenant] = c.InFlightRefusals
	}
	if inFlight["exporter"] != overCap || inFlight["loopy"] != 0 {
		t.Fatalf("JSON: in-flight refusals %v, want exporter's %d and none of loopy's", inFlight, overCap)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ctx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(exe),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(pageWidth, 640),
	)
	defer cancelAlloc()
	ctx, cancelTab := chromedp.NewContext(ctx)
	defer cancelTab()

	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatalf("Chromium: %v", err)
	}
	if _, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
		Headers: network.Headers{"Authorization": "Bearer " + token}}); err != nil {
		t.Fatalf("Chromium: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/admin/tollgate"), chromedp.WaitVisible(chromedp.CSS("#candidates svg.chart"))); err != nil {
		t.Fatalf("Chromium: %v", err)
	}
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]browserRow](`[...document.querySelectorAll("tr.candidate")].map(r => {
		const svg = r.querySelector("svg.chart");
		const bars = [...svg.querySelectorAll("rect")];
		return {
			Tenant: r.dataset.tenant, Plan: r.dataset.plan, Suggested: r.dataset.suggested,
			Throttled: Number(r.dataset.throttled), InFlight: Number(r.dataset.inflight),
			InFlightCell: r.querySelector("td.inflight").textContent,
			Bars: bars.map(b => Number(b.dataset.v)),
			Heights: bars.map(b => b.getBBox().height),
			ChartWidth: svg.getBoundingClientRect().width,
		};
	})`))
	if err != nil {
		t.Fatalf("Chromium: %v", err)
	}
	// Everything fits the width: no scrolling sideways, in the page or in
	// the table's card.
	overflow, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`[document.documentElement.scrollWidth,
		document.querySelector(".card").scrollWidth - document.querySelector(".card").clientWidth]`))
	if err != nil {
		t.Fatalf("Chromium: %v", err)
	}
	if overflow[0] > pageWidth || overflow[1] > 0 {
		t.Errorf("at %d px the page is %.0f px wide and its table %.0f px wider than its card", pageWidth, overflow[0], overflow[1])
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("Chromium: %v", err)
	}

	if len(rows) != len(rep.Candidates) {
		t.Fatalf("the page shows %d candidates, the JSON %d", len(rows), len(rep.Candidates))
	}
	if rows[0].Tenant != "loopy" || rows[0].Plan != "free" || rows[0].Suggested != "growth" {
		t.Fatalf("first row %+v; want loopy on free, growth suggested", rows[0])
	}
	for i, row := range rows {
		cand := rep.Candidates[i]
		if row.Tenant != cand.Tenant || row.Plan != cand.Plan || row.Suggested != cand.SuggestedPlan || row.Throttled != cand.ThrottledRequests ||
			row.InFlight != cand.InFlightRefusals {
			t.Fatalf("row %d: page %+v, JSON %+v", i, row, cand)
		}
		if want := "—"; cand.InFlightRefusals > 0 {
			want = fmt.Sprint(cand.InFlightRefusals)
			if row.InFlightCell != want {
				t.Errorf("%s: In flight shows %q, want %q", row.Tenant, row.InFlightCell, want)
			}
		} else if row.InFlightCell != want {
			t.Errorf("%s: In flight shows %q, want %q", row.Tenant, row.InFlightCell, want)
		}
		if len(row.Bars) != len(cand.Series) || row.ChartWidth < 100 {
			t.Fatalf("%s: %d bars %.0f px wide; the JSON has %d points", row.Tenant, len(row.Bars), row.ChartWidth, len(cand.Series))
		}
		var most float64
		for j, p := range cand.Series {
			if row.Bars[j] != p.Throttled {
				t.Fatalf("%s, bar %d: %d on the page, %d in the JSON", row.Tenant, j, row.Bars[j], p.Throttled)
			}
			if p.Throttled > 0 && row.Heights[j] < 2 {
				t.Fatalf("%s, bar %d: %d throttled drawn %.1f px high", row.Tenant, j, p.Throttled, row.Heights[j])
			}
			most = max(most, row.Heights[j])
		}
		if most < 30 {
			t.Fatalf("%s: the tallest bar is %.1f px", row.Tenant, most)
		}
	}
	// loopy's chart: nothing until the last three hours, the flood now.
	bars := rows[0].Bars
	if bars[len(bars)-1] != int64(throttled) || bars[len(bars)-4] != 0 || bars[len(bars)-2] == 0 {
		t.Fatalf("loopy's bars %v (the flood had %d 429s)", bars, throttled)
	}
	if len(png) < 10_000 {
		t.Fatalf("a screenshot of %d bytes", len(png))
	}
	if *screenshot != "" {
		if err := os.WriteFile(*screenshot, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
