// Command plot draws the pictures of docs/img from tollgate's own code:
//
//   - token-bucket-vs-fixed-window.svg: the requests a bursty client gets
//     through under tollgate's token bucket (the real algorithm: the
//     memory store's Take) and under a fixed-window counter with the same
//     nominal limit, over 30 seconds;
//   - rate-and-quota.svg: a plan with a token bucket and a daily quota (the
//     example apps' trial plan) under a client that asks for twice its
//     rate, decided by the real Limiter and HTTP middleware.
//
// With -tables it prints instead the tables of docs/plans.md: the headers a
// client sees at each step of those examples. Run it from the repository
// root:
//
//	go run ./tools/plot
//	go run ./tools/plot -tables
//
// The simulations run on a manual clock with no randomness, so the output
// is the same on every run; tests check that the committed pictures and
// tables are current.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/storetest"
)

// The limit: tollgate's free plan, 20 burst at 2/s, against a fixed window
// of 20 requests per 10 s, the same 2 requests a second in the long run and
// the same 20 at once.
var (
	plan         = defaultPlan("free")
	windowLength = time.Duration(plan.Limit.Burst) * time.Duration(float64(time.Second)/plan.Limit.Rate)
	windowQuota  = plan.Limit.Burst
	horizon      = 30 * time.Second
)

// The client: a queue of queueLen requests replayed every queueGap from
// queueStart, across the fixed window's boundary at 10 s, then a retry loop
// at 4 requests a second, twice the plan's rate, from loopStart on.
const (
	queueLen   = 50
	queueGap   = 20 * time.Millisecond
	queueStart = 9500 * time.Millisecond
	loopStart  = 15 * time.Second
	loopGap    = 250 * time.Millisecond
)

// defaultPlan returns the default plan called name.
func defaultPlan(name string) tollgate.Plan {
	for _, p := range tollgate.DefaultPlans() {
		if p.Name == name {
			return p
		}
	}
	panic("plot: no default plan " + name)
}

// requests returns the instants the client sends its requests.
func requests() []time.Duration {
	var ts []time.Duration
	for i := range queueLen {
		ts = append(ts, queueStart+time.Duration(i)*queueGap)
	}
	for t := loopStart; t < horizon; t += loopGap {
		ts = append(ts, t)
	}
	return ts
}

// A run is the outcome of one limiter over the client's requests.
type run struct {
	allowed []time.Duration
	denied  []time.Duration
}

// tokenBucket decides each request with the memory store's Take, on a
// manual clock, as the Limiter's store decides it.
func tokenBucket(ts []time.Duration) run {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0))
	defer s.Close()
	var r run
	var elapsed time.Duration
	for _, t := range ts {
		clock.Advance(t - elapsed)
		elapsed = t
		res, err := s.Take(context.Background(), "client", plan.Limit, 1)
		if err != nil {
			panic(err)
		}
		if res.Allowed {
			r.allowed = append(r.allowed, t)
		} else {
			r.denied = append(r.denied, t)
		}
	}
	return r
}

// fixedWindow counts requests per window of windowLength starting at 0 and
// allows windowQuota of them in each.
func fixedWindow(ts []time.Duration) run {
	var r run
	window, count := int64(-1), int64(0)
	for _, t := range ts {
		if w := int64(t / windowLength); w != window {
			window, count = w, 0
		}
		if count < windowQuota {
			count++
			r.allowed = append(r.allowed, t)
		} else {
			r.denied = append(r.denied, t)
		}
	}
	return r
}

// maxIn returns the most requests of ts (sorted) that fall within any span
// of length d, and the instant that span starts.
func maxIn(ts []time.Duration, d time.Duration) (int, time.Duration) {
	best, at := 0, time.Duration(0)
	j := 0
	for i := range ts {
		for ts[j] <= ts[i]-d {
			j++
		}
		if n := i - j + 1; n > best {
			best, at = n, ts[j]
		}
	}
	return best, at
}

// The figure's geometry, in SVG user units.
const (
	width, height = 880.0, 560.0
	left, right   = 80.0, 850.0 // x of 0 s and of the horizon
	top, bottom   = 70.0, 350.0 // y of yMax and of 0 requests
	yMax          = 70
	rowSent       = 405.0 // y of the raster rows
	rowBucket     = 440.0
	rowWindow     = 475.0

	colourBucket = "#1f6fb4"
	colourWindow = "#d0461e"
	colourGrey   = "#8a8a8a"
)

func x(t time.Duration) float64 { return left + (right-left)*t.Seconds()/horizon.Seconds() }
func y(n int) float64           { return bottom - (bottom-top)*float64(n)/yMax }

// render writes the SVG.
func render(w io.Writer) error {
	ts := requests()
	tb, fw := tokenBucket(ts), fixedWindow(ts)
	tbMax, _ := maxIn(tb.allowed, time.Second)
	fwMax, fwAt := maxIn(fw.allowed, time.Second)

	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }

	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="13">`,
		width, height, width, height)
	p(`<title>Allowed requests over time: token bucket (GCRA) against a fixed window, same nominal limit</title>`)
	p(`<rect width="100%%" height="100%%" fill="#ffffff"/>`)
	p(`<text x="%.0f" y="28" font-size="17" font-weight="bold">A bursty client: token bucket against fixed window</text>`, left)
	p(`<text x="%.0f" y="50" fill="#444">token bucket: %s (tollgate's %q plan). fixed window: %d requests per %v window.</text>`,
		left, plan.Limit, plan.Name, windowQuota, windowLength)

	// The double burst, shaded.
	x0, x1 := x(fwAt), x(fwAt+time.Second)
	p(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="0.12"/>`, x0, top, x1-x0, rowWindow+12-top, colourWindow)

	// Grid and axes.
	for n := 0; n <= yMax; n += 10 {
		p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e3e3e3"/>`, left, y(n), right, y(n))
		p(`<text x="%.1f" y="%.1f" text-anchor="end" fill="#444">%d</text>`, left-8, y(n)+4, n)
	}
	for s := time.Duration(0); s <= horizon; s += 5 * time.Second {
		p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e3e3e3"/>`, x(s), top, x(s), bottom)
		p(`<text x="%.1f" y="%.1f" text-anchor="middle" fill="#444">%d s</text>`, x(s), bottom+18, int(s.Seconds()))
	}
	for s := windowLength; s < horizon; s += windowLength {
		p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="5 4"/>`, x(s), top, x(s), rowWindow+12, colourWindow)
	}
	p(`<text x="%.1f" y="%.1f" font-size="11" fill="%s">fixed windows reset</text>`, x(2*windowLength)+5, top+14, colourWindow)
	p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#444"/>`, left, bottom, right, bottom)
	p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#444"/>`, left, top, left, bottom)
	p(`<text transform="translate(24 %.1f) rotate(-90)" text-anchor="middle" fill="#444">requests allowed so far</text>`, (top+bottom)/2)

	// The cumulative step lines.
	step := func(allowed []time.Duration, colour string) {
		pts := fmt.Sprintf("%.1f,%.1f", x(0), y(0))
		for i, t := range allowed {
			pts += fmt.Sprintf(" %.1f,%.1f %.1f,%.1f", x(t), y(i), x(t), y(i+1))
		}
		pts += fmt.Sprintf(" %.1f,%.1f", x(horizon), y(len(allowed)))
		p(`<polyline points="%s" fill="none" stroke="%s" stroke-width="2.5" stroke-linejoin="round"/>`, pts, colour)
	}
	step(fw.allowed, colourWindow)
	step(tb.allowed, colourBucket)

	// Legend.
	lx, ly := left+16, top+18
	p(`<rect x="%.1f" y="%.1f" width="300" height="50" fill="#ffffff" stroke="#cccccc"/>`, lx-8, ly-14)
	p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`, lx, ly-4, lx+24, ly-4, colourBucket)
	p(`<text x="%.1f" y="%.1f">token bucket: %d allowed, at most %d in any 1 s</text>`, lx+32, ly, len(tb.allowed), tbMax)
	p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`, lx, ly+18, lx+24, ly+18, colourWindow)
	p(`<text x="%.1f" y="%.1f">fixed window: %d allowed, at most %d in any 1 s</text>`, lx+32, ly+22, len(fw.allowed), fwMax)

	// The annotation of the double burst.
	ax := x1 + 10
	p(`<text x="%.1f" y="%.1f" fill="%s" font-weight="bold">double burst: %d requests in 1 s</text>`, ax, y(fwMax)-46, colourWindow, fwMax)
	p(`<text x="%.1f" y="%.1f" fill="%s">%d before the reset at %v</text>`, ax, y(fwMax)-28, colourWindow, windowQuota, windowLength)
	p(`<text x="%.1f" y="%.1f" fill="%s">and %d after it</text>`, ax, y(fwMax)-10, colourWindow, fwMax-int(windowQuota))
	p(`<text x="%.1f" y="%.1f" fill="%s" font-weight="bold">token bucket: the burst, then %g/s</text>`, ax, y(tbMax)+22, colourBucket, plan.Limit.Rate)

	// The raster: every request sent, and which each limiter allowed.
	ticks := func(row float64, ts []time.Duration, colour string, h float64) {
		for _, t := range ts {
			p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.2"/>`, x(t), row-h, x(t), row+h, colour)
		}
	}
	p(`<text x="%.1f" y="%.1f" text-anchor="end" fill="#444">sent</text>`, left-8, rowSent+4)
	p(`<text x="%.1f" y="%.1f" text-anchor="end" fill="%s">bucket</text>`, left-8, rowBucket+4, colourBucket)
	p(`<text x="%.1f" y="%.1f" text-anchor="end" fill="%s">window</text>`, left-8, rowWindow+4, colourWindow)
	ticks(rowSent, ts, colourGrey, 9)
	ticks(rowBucket, tb.allowed, colourBucket, 9)
	ticks(rowWindow, fw.allowed, colourWindow, 9)
	p(`<text x="%.1f" y="%.1f" font-size="12" fill="#444">Each tick is one request: sent by the client (a queue of %d replayed every %v from %v, then %g requests/s from %v),</text>`,
		left, rowWindow+38, queueLen, queueGap, queueStart, float64(time.Second)/float64(loopGap), loopStart)
	p(`<text x="%.1f" y="%.1f" font-size="12" fill="#444">and allowed by each limiter. Both allow about 2 requests/s in the long run; only the token bucket holds that over every second.</text>`, left, rowWindow+56)
	p(`</svg>`)
	_, err := w.Write(b.Bytes())
	return err
}

func main() {
	dir := flag.String("dir", "docs/img", "the directory to write the SVG files to")
	tables := flag.Bool("tables", false, "print the header tables of docs/plans.md instead")
	flag.Parse()
	if *tables {
		fmt.Print(headerTables())
		return
	}
	for name, render := range figures {
		path := filepath.Join(*dir, name)
		f, err := os.Create(path)
		if err != nil {
			log.Fatalf("plot: %v (run it from the repository root, or pass -dir)", err)
		}
		if err := render(f); err != nil {
			log.Fatalf("plot: %s: %v", path, err)
		}
		if err := f.Close(); err != nil {
			log.Fatalf("plot: %v", err)
		}
	}
}

// figures are the SVG files of docs/img, by name, and what draws each.
var figures = map[string]func(io.Writer) error{
	"token-bucket-vs-fixed-window.svg": render,
	"rate-and-quota.svg":               renderPolicies,
}
