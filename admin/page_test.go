package admin_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// TestPageShowsHostileTenantsAsTheyAre: tenant IDs and reasons that hold
// bidi controls, invalid UTF-8 or markup are shown quoted or escaped, never
// drawn, and link to their own view byte for byte.
func TestPageShowsHostileTenantsAsTheyAre(t *testing.T) {
	r := newTestReplica(t, nil)
	ctx := context.Background()
	hostile := []string{"\u202eexe.gnp", "t\xff\xfe", `<script>alert(1)</script>`, `"quoted"`, "zero\u200bwidth"}
	for _, tenant := range hostile {
		take(t, r.limiter, tenant, 25) // throttled: a candidate
		if err := r.limiter.Apply(ctx, tollgate.Change{Tenant: tenant, Action: "override", Override: tollgate.Override{Plan: "growth"},
			Reason: "see \u202etxt.fdp", By: "admin"}); err != nil {
			t.Fatal(err)
		}
	}
	page := r.do(t, "GET", "?window=1h", "", "Authorization", "Bearer "+token)
	if page.status != 200 {
		t.Fatal(page.status)
	}
	for _, bad := range []string{"\u202e", "\xff", "<script>", "\u200b"} {
		if strings.Contains(page.body, bad) {
			t.Errorf("the page holds %q as it is", bad)
		}
	}
	for _, want := range []string{`&#34;\u202eexe.gnp&#34;`, `&#34;t\xff\xfe&#34;`, `&lt;script&gt;alert(1)&lt;/script&gt;`, `&#34;\&#34;quoted\&#34;&#34;`} {
		if !strings.Contains(page.body, want) {
			t.Errorf("the page does not show %s", want)
		}
	}
	// Each links to its view, which finds the tenant byte for byte.
	for _, tenant := range hostile {
		href := "?tenant=" + url.QueryEscape(tenant)
		if !strings.Contains(page.body, `href="`+strings.ReplaceAll(href, "&", "&amp;")+`"`) {
			t.Errorf("no link %s", href)
		}
		view := r.do(t, "GET", href, "", "Authorization", "Bearer "+token)
		if view.status != 200 || !strings.Contains(view.body, `id="tenant"`) || !strings.Contains(view.body, `<span class="plan">growth</span>`) {
			t.Errorf("%q: the tenant's view: %d", tenant, view.status)
		}
	}
}

// TestPageForms: the forms' posts change the tenant and send the browser
// to its view; a mistake is shown on the page, with a 4xx.
func TestPageForms(t *testing.T) {
	r := newTestReplica(t, nil)
	form := func(path, body string) answer {
		return r.do(t, "POST", path, body, "Authorization", "Bearer "+token, "Content-Type", "application/x-www-form-urlencoded", "Accept", "text/html")
	}
	take(t, r.limiter, "initech", 60)
	a := form("", "action=reset&tenant=initech&reason=mistake")
	if a.status != http.StatusSeeOther || a.header.Get("Location") != "?tenant=initech&done=reset" {
		t.Fatalf("reset: %d %q", a.status, a.header.Get("Location"))
	}
	if d := inspect(t, r.limiter, "initech"); d.Remaining != 100 {
		t.Fatalf("after the reset form: %d left", d.Remaining)
	}
	view := r.do(t, "GET", "?tenant=initech&done=reset", "", "Authorization", "Bearer "+token)
	if !strings.Contains(view.body, `id="notice"`) || !strings.Contains(view.body, `action="?tenant=initech"`) {
		t.Fatalf("the tenant's view after a reset:\n%s", view.body)
	}
	// The tenant's view posts to itself, the tenant in its URL.
	tenant := "a&b=c ü/?#"
	a = form("?tenant="+url.QueryEscape(tenant), "action=override&plan=enterprise&for=3d&reason=weekend")
	if a.status != http.StatusSeeOther {
		t.Fatalf("override: %d %s", a.status, a.body)
	}
	if d := take(t, r.limiter, tenant, 1); d.Plan != "enterprise" {
		t.Fatalf("after the override form: plan %s", d.Plan)
	}
	list, _ := r.limiter.Overrides(context.Background())
	if len(list) != 1 || list[0].Tenant != tenant || list[0].By != "admin" || list[0].Reason != "weekend" ||
		list[0].Override.ExpiresAt.Sub(list[0].Time).Hours() < 71.9 {
		t.Fatalf("overrides: %+v", list)
	}
	if a = form("?tenant="+url.QueryEscape(tenant), "action=clear&reason=over"); a.status != http.StatusSeeOther {
		t.Fatalf("clear: %d", a.status)
	}
	if d := take(t, r.limiter, tenant, 1); d.Plan != "free" {
		t.Fatalf("after the clear form: plan %s", d.Plan)
	}
	// Mistakes are shown on the page, with a 4xx.
	if a := r.do(t, "GET", "?tenant=a%00b", "", "Authorization", "Bearer "+token); a.status != http.StatusBadRequest || !strings.Contains(a.body, `id="error"`) {
		t.Fatalf("a tenant with a NUL: %d", a.status)
	}
	a = form("", "action=override&tenant=initech&plan=platinum&reason=x")
	if a.status != http.StatusBadRequest || !strings.Contains(a.body, `id="error"`) || !strings.Contains(a.body, "unknown plan") {
		t.Fatalf("an unknown plan: %d\n%s", a.status, a.body)
	}
}
