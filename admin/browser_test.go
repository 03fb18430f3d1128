package admin_test

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"
	tollgate "github.com/tollgate-go/tollgate/core"
)

var screenshot = flag.String("screenshot", "", "write PNGs of the admin page to this file and of a tenant's view beside it (-tenant.png)")

// chromium returns the path of a Chromium (or Chrome) to drive, or skips the
// test where none is installed: CI installs the Debian package chromium, so
// CI never skips.
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
	msg := "no Chromium on this machine (install the Debian package chromium, or set CHROMIUM): the browser test did not run"
	if os.Getenv("TOLLGATE_CI") != "" {
		t.Fatal(msg) // CI installs the tool: a skip there would hide the test
	}
	t.Skip(msg)
	return ""
}

// layout is what the browser says of the page's width.
type layout struct {
	ScrollWidth, ClientWidth, InnerWidth int
}

const measureLayout = `({ScrollWidth: document.documentElement.scrollWidth, ClientWidth: document.documentElement.clientWidth, InnerWidth: window.innerWidth})`

// TestPageInChromium opens the page in a 1280-pixel-wide Chromium, which
// logs in with HTTP Basic when the page asks, checks that nothing scrolls
// sideways, resets a tenant and sets an override through the page's
// forms, and checks both through the Limiter.
func TestPageInChromium(t *testing.T) {
	exe := chromium(t)
	r := newTestReplica(t, nil)
	bg := context.Background()

	// Candidates, some of them as wide as tenant IDs get, and an override
	// with a long reason without a space. Each takes seconds' worth of its
	// rate past its burst: Redis's clock runs while they take, and globex,
	// at 50/s, refilled the 20 tokens it once took past its burst of 500
	// on a slow machine and was no candidate.
	take(t, r.limiter, "initech", 130)
	take(t, r.limiter, "globex", 700)
	take(t, r.limiter, strings.Repeat("w", 256), 40)
	take(t, r.limiter, "\u202eevil-tenant", 30)
	if err := r.limiter.Apply(bg, tollgate.Change{Tenant: strings.Repeat("o", 256), Action: "override",
		Override: tollgate.Override{Plan: "enterprise", ExpiresAt: time.Now().Add(48 * time.Hour)},
		Reason:   strings.Repeat("r", 500), By: "desk"}); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(bg, 90*time.Second)
	defer cancel()
	ctx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(exe),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	defer cancelAlloc()
	ctx, cancelTab := chromedp.NewContext(ctx)
	defer cancelTab()

	// The browser pauses every request; one that the page answers 401
	// raises an auth challenge, answered with the token as the Basic
	// password, as a person would type it in the browser's dialog.
	var challenges atomic.Int32
	paused := chromedp.Events(ctx, fetch.RequestPaused)
	auth := chromedp.Events(ctx, fetch.AuthRequired)
	go func() {
		for ev, err := range paused {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
		}
	}()
	go func() {
		for ev, err := range auth {
			if err != nil {
				return
			}
			challenges.Add(1)
			_, _ = chromedp.Call(ctx, fetch.ContinueWithAuth, fetch.ContinueWithAuthParams{RequestID: ev.RequestID,
				AuthChallengeResponse: &fetch.AuthChallengeResponse{
					Response: fetch.AuthChallengeResponseResponseProvideCredentials, Username: "support", Password: token}})
		}
	}()
	yes := true
	if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{HandleAuthRequests: &yes}); err != nil {
		t.Fatalf("Chromium: %v", err)
	}

	fits := func(what string) {
		t.Helper()
		l, err := chromedp.Run(ctx, chromedp.Evaluate[layout](measureLayout))
		if err != nil {
			t.Fatalf("Chromium: %v", err)
		}
		t.Logf("%s: %d px wide in a %d px window (%d px client)", what, l.ScrollWidth, l.InnerWidth, l.ClientWidth)
		if l.InnerWidth != 1280 || l.ScrollWidth > l.ClientWidth {
			t.Errorf("%s scrolls sideways: %+v", what, l)
		}
	}

	// Log in and look.
	if err := chromedp.Do(ctx, chromedp.Navigate(r.srv.URL+mountPath+"?window=1h"), chromedp.WaitVisible(chromedp.CSS("#candidates"))); err != nil {
		t.Fatalf("Chromium: %v", err)
	}
	if challenges.Load() == 0 {
		t.Fatal("the page opened without asking for credentials")
	}
	label, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#label")))
	if err != nil || label != "admin" {
		t.Fatalf("signed in as %q, %v", label, err)
	}
	ranked, err := chromedp.Run(ctx, chromedp.Evaluate[[]int64](
		`[...document.querySelectorAll("tr.candidate")].map(r => Number(r.dataset.tokens))`))
	if err != nil || len(ranked) != 4 {
		t.Fatalf("candidates on the page: %v, %v", ranked, err)
	}
	for i := 1; i < len(ranked); i++ {
		if ranked[i] > ranked[i-1] {
			t.Fatalf("the candidates are not ranked by throttled tokens: %v", ranked)
		}
	}
	fits("the page")
	shoot(t, ctx, *screenshot)

	// Reset initech through the page's form.
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS("#reset-form input[name=tenant]"), "initech"),
		chromedp.SetValue(chromedp.CSS("#reset-form input[name=reason]"), "throttled by mistake"),
		chromedp.Click(chromedp.CSS("#reset-form button")),
		chromedp.WaitVisible(chromedp.CSS("#notice")),
	); err != nil {
		t.Fatalf("Chromium: %v", err)
	}
	if d := inspect(t, r.limiter, "initech"); d.Remaining != 100 {
		t.Fatalf("after the reset form: %d of 100 left", d.Remaining)
	}
	fits("the tenant's view")

	// Override initech's plan from its view, reached from its row.
	if err := chromedp.Do(ctx,
		chromedp.Navigate(r.srv.URL+mountPath+"?window=1h"),
		chromedp.Click(chromedp.CSS(`#candidates tr[data-tenant="initech"] a`)),
		chromedp.WaitVisible(chromedp.CSS(`#tenant[data-tenant="initech"]`)),
		chromedp.WaitNotPresent(chromedp.CSS("#notice")),
		chromedp.SetValue(chromedp.CSS("#override-form input[name=plan]"), "enterprise"),
		chromedp.SetValue(chromedp.CSS("#override-form input[name=for]"), "2h"),
		chromedp.SetValue(chromedp.CSS("#override-form input[name=reason]"), "room for the weekend"),
		chromedp.Click(chromedp.CSS("#override-form button")),
		chromedp.WaitVisible(chromedp.CSS("#notice")),
	); err != nil {
		t.Fatalf("Chromium: %v", err)
	}
	if d := take(t, r.limiter, "initech", 1); d.Plan != "enterprise" {
		t.Fatalf("after the override form the Limiter decides on %s", d.Plan)
	}
	list, err := r.limiter.Overrides(bg)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, o := range list {
		if o.Tenant == "initech" {
			found = true
			if left := time.Until(o.Override.ExpiresAt); o.By != "admin" || o.Reason != "room for the weekend" || left < 119*time.Minute || left > 2*time.Hour {
				t.Fatalf("the override: %+v", o)
			}
		}
	}
	if !found {
		t.Fatalf("no override of initech: %+v", list)
	}
	plan, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#tenant-plan .plan")))
	if err != nil || plan != "enterprise" {
		t.Fatalf("the tenant's view shows plan %q, %v", plan, err)
	}
	fits("the tenant's view with its override")
	if *screenshot != "" {
		shoot(t, ctx, strings.TrimSuffix(*screenshot, ".png")+"-tenant.png")
	}

	// Both changes are listed, newest first, with the credential's label.
	if err := chromedp.Do(ctx, chromedp.Navigate(r.srv.URL+mountPath)); err != nil {
		t.Fatalf("Chromium: %v", err)
	}
	changes, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
		`[...document.querySelectorAll("tr.change")].map(r => r.dataset.tenant + " " + r.dataset.action + " " + r.lastElementChild.textContent)`))
	if err != nil || len(changes) != 3 || changes[0] != "initech override admin" || changes[1] != "initech reset admin" {
		t.Fatalf("changes on the page: %q, %v", changes, err)
	}
	fits("the page after the changes")
}

// shoot writes a PNG of the whole page to file, if named.
func shoot(t *testing.T, ctx context.Context, file string) {
	t.Helper()
	if file == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, png, 0o644); err != nil {
		t.Fatal(err)
	}
}
