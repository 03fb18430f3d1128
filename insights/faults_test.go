package insights_test

import (
	"context"
	"encoding/json"
	"math"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/redistest"
	"github.com/tollgate-go/tollgate/insights"
	"github.com/tollgate-go/tollgate/insights/redisexchange"
)

// pageBudget is how long the page may take, whatever the Exchange does.
const pageBudget = 2 * time.Second

// The page while its exchange Redis accepts connections and never answers,
// with the client's default timeouts and with none: every load, eight at
// once, answers within the budget with the other replicas' counts of the
// last answer, marked stale, and this replica's current ones; counting
// decisions meanwhile never waits on Redis.
func TestPageAnswersWhileTheExchangeIsSilent(t *testing.T) {
	for name, opts := range map[string]redis.Options{
		"default timeouts": {},
		"no timeouts":      {ReadTimeout: -1, WriteTimeout: -1},
	} {
		t.Run(name, func(t *testing.T) { pageWhileSilent(t, opts) })
	}
}

func pageWhileSilent(t *testing.T, opts redis.Options) {
	addr := redistest.Shared(t)
	prefix := redistest.Prefix(t) // deleted after the trackers' last publication
	proxy := redistest.NewProxy(t, addr)
	exchange := func(addr string) insights.Exchange {
		o := opts
		o.Addr = addr
		c := redis.NewClient(&o)
		t.Cleanup(func() { c.Close() })
		x, err := redisexchange.New(c, redisexchange.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	c := newClock(monday)
	a := newTracker(t, c, insights.WithExchange(exchange(proxy.Addr()), "a"), insights.WithFlushInterval(time.Hour))
	b := newTracker(t, c, insights.WithExchange(exchange(addr), "b"), insights.WithFlushInterval(time.Hour))
	la := newLimiter(t, c, a)
	flood(t, la, "loopy", "/api/hello", 1, 60)
	flood(t, newLimiter(t, c, b), "initech", "/api/hello", 1, 130)
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := candidates(t, a, insights.LastHour)
	if !before.Fleet || before.Stale || before.FleetError != "" || len(before.Candidates) != 2 || before.Candidates[1].Tenant != "initech" {
		t.Fatalf("before the silence: %+v", before)
	}
	initech, readAt := before.Candidates[1], before.To

	proxy.Silence()
	defer proxy.Resume() // before the clean-ups: what Redis was sent lands, and is deleted
	c.add(time.Minute)
	late := flood(t, la, "late", "/api/hello", 1, 40) // counted on a while Redis is silent

	// A publication that waits on the silent Redis, as the background
	// one would.
	flushed := make(chan error, 1)
	go func() { flushed <- a.Flush(context.Background()) }()
	// Counting decisions never waits for it, nor for the reads below: a
	// wait on Redis would last the client's read timeout, or for ever.
	var slowest time.Duration
	for range 200 {
		start := time.Now()
		la.Take(context.Background(), tollgate.Request{Tenant: "loopy", Route: "/api/hello"})
		slowest = max(slowest, time.Since(start))
	}
	if slowest > 500*time.Millisecond {
		t.Errorf("a decision took %v while the exchange was silent", slowest)
	}

	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	type load struct {
		took time.Duration
		body string
	}
	loads := make([]load, 8)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range loads {
		wg.Go(func() {
			url := srv.URL + "?window=1h"
			if i%2 == 1 {
				url += "&format=json"
			}
			s := time.Now()
			_, body := get(t, url)
			loads[i] = load{time.Since(s), body}
		})
	}
	wg.Wait()
	all := time.Since(start)
	for i, l := range loads {
		if l.took > pageBudget {
			t.Errorf("load %d took %v", i, l.took)
		}
		if i%2 == 0 {
			if !strings.Contains(l.body, `id="fleet-stale"`) || !strings.Contains(l.body, `data-tenant="initech"`) || !strings.Contains(l.body, `data-tenant="late"`) {
				t.Errorf("page %d does not show b's counts, stale, and a's current ones:\n%s", i, l.body)
			}
			continue
		}
		var rep insights.Report
		if err := json.Unmarshal([]byte(l.body), &rep); err != nil {
			t.Fatal(err)
		}
		byTenant := map[string]insights.Candidate{}
		for _, c := range rep.Candidates {
			byTenant[c.Tenant] = c
		}
		if !rep.Fleet || !rep.Stale || !rep.FleetAsOf.Equal(readAt) || rep.FleetError == "" ||
			!reflect.DeepEqual(rep.Replicas, []string{"a", "b"}) || byTenant["late"].ThrottledRequests != late.throttled ||
			byTenant["initech"].ThrottledRequests != initech.ThrottledRequests {
			t.Errorf("JSON %d: %+v", i, rep)
		}
	}
	t.Logf("8 concurrent loads of the page while the exchange is silent: all answered within %v, the slowest in %v; slowest decision meanwhile %v",
		all, slices.MaxFunc(loads, func(x, y load) int { return int(x.took - y.took) }).took, slowest)
	if all > pageBudget {
		t.Errorf("8 concurrent loads took %v together: they queue", all)
	}

	// Once Redis answers again, so is the page fresh.
	proxy.Resume()
	deadline := time.Now().Add(20 * time.Second)
	for {
		rep := candidates(t, a, insights.LastHour)
		if !rep.Stale && rep.Fleet && rep.FleetError == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still stale after Redis came back: %+v", rep)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := <-flushed; err != nil {
		t.Errorf("the publication held up by the silence: %v", err)
	}
}

// A replica restarted under the same explicit name adds to what its
// predecessor published: tenants only the dead process saw stay, and the
// tenants both saw add up.
func TestARestartedReplicaAddsToItsPredecessor(t *testing.T) {
	x, client, prefix := newExchange(t)
	c := newClock(monday)
	first, err := insights.New(insights.WithClock(c.now), insights.WithPlans(tollgate.DefaultPlans()),
		insights.WithExchange(x, "api-1"), insights.WithFlushInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	l := newLimiter(t, c, first)
	loopy1 := flood(t, l, "loopy", "/api/hello", 1, 50)
	gone := flood(t, l, "gone", "/api/hello", 1, 30)
	if err := first.Close(); err != nil { // its last publication
		t.Fatal(err)
	}

	c.add(time.Minute)
	second := newTracker(t, c, insights.WithExchange(x, "api-1"), insights.WithFlushInterval(time.Hour))
	l = newLimiter(t, c, second)
	loopy2 := flood(t, l, "loopy", "/api/hello", 1, 40)
	fresh := flood(t, l, "fresh", "/api/hello", 1, 25)
	reader := newTracker(t, c, insights.WithExchange(x, "reader"), insights.WithFlushInterval(time.Hour))

	// The restarted replica reads first: a read publishes the reader's
	// own counts, and the other replica sees only what was published.
	for _, r := range []struct {
		name string
		tr   *insights.Tracker
	}{{"the restarted replica", second}, {"another replica", reader}} {
		name, tr := r.name, r.tr
		rep := candidates(t, tr, insights.LastHour)
		got := map[string]int64{}
		for _, c := range rep.Candidates {
			got[c.Tenant] = c.ThrottledRequests
		}
		want := map[string]int64{"loopy": loopy1.throttled + loopy2.throttled, "gone": gone.throttled, "fresh": fresh.throttled}
		if !rep.Fleet || !reflect.DeepEqual(got, want) || !reflect.DeepEqual(rep.Replicas, []string{"api-1"}) {
			t.Errorf("%s reports %v from %v, want %v from [api-1]", name, got, rep.Replicas, want)
		}
	}
	// Each process has a field of its own in each bucket.
	for _, k := range scanKeys(t, client, prefix) {
		if n := client.HLen(context.Background(), k).Val(); n != 2 {
			t.Errorf("%s: %d fields, want one for each process of api-1", k, n)
		}
	}
}

// 10,000 throttled requests of a cost close to the largest burst add up to
// the largest count, on one replica and across two, never to a negative
// one.
func TestThrottledTokensSaturate(t *testing.T) {
	x, _, _ := newExchange(t)
	c := newClock(monday)
	const cost = 999_999_999_999_999
	huge := tollgate.Plan{Name: "huge", Limit: tollgate.Limit{Rate: 1e6, Burst: cost}}
	var trackers []*insights.Tracker
	for _, name := range []string{"a", "b"} {
		tr := newTracker(t, c, insights.WithExchange(x, name), insights.WithFlushInterval(time.Hour))
		l, err := tollgate.New(newModelStore(c), tollgate.SinglePlan(huge), tollgate.WithObserver(tr), tollgate.WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		if got := flood(t, l, "whale", "/api/import", cost, 10_001); got.throttled != 10_000 {
			t.Fatalf("%s: %+v", name, got)
		}
		trackers = append(trackers, tr)
	}
	if err := trackers[1].Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, w := range insights.Windows {
		rep := candidates(t, trackers[0], w)
		if len(rep.Candidates) != 1 || rep.Replicas == nil {
			t.Fatalf("%s: %+v", w, rep)
		}
		whale := rep.Candidates[0]
		if rep.ThrottledTokens != math.MaxInt64 || whale.ThrottledTokens != math.MaxInt64 || whale.ThrottledRequests != 20_000 ||
			whale.PeakTokensPerSecond != math.MaxInt64 || !whale.OutgrowsPlans {
			t.Fatalf("%s: %d throttled tokens in all; whale %+v", w, rep.ThrottledTokens, whale)
		}
	}
	srv := httptest.NewServer(trackers[0].Handler())
	defer srv.Close()
	if _, body := get(t, srv.URL+"?window=1h"); !strings.Contains(body, "<b>9,223,372,036,854,775,807</b> throttled tokens") || strings.Contains(body, ">-") {
		t.Fatal("the page does not show the saturated count")
	}
}

// Tenant IDs that hold a bidirectional control or invalid UTF-8 are shown
// quoted, on the page and in its JSON, and distinct tenants stay distinct.
func TestHostileTenantIDsAreShownEscaped(t *testing.T) {
	c := newClock(monday)
	tr := newTracker(t, c)
	l := newLimiter(t, c, tr)
	tenants := map[string]string{ // the ID, and how it is shown
		"tenant-\xff":          `"tenant-\xff"`,
		"tenant-\xfe":          `"tenant-\xfe"`,
		"invoice\u202Efdp.exe": `"invoice\u202efdp.exe"`,
		"zero\u200Bwidth":      `"zero\u200bwidth"`,
		`"tenant-\xff"`:        `"\"tenant-\\xff\""`, // a quote first: quoted too
		`tenant-\xff`:          `tenant-\xff`,        // backslashes only: as it is
		"ünïcode tenant, 東京":   "ünïcode tenant, 東京",
	}
	for id := range tenants {
		if got := flood(t, l, id, "/api/hello", 1, 25); got.throttled == 0 {
			t.Fatalf("%q was not throttled: %+v", id, got)
		}
	}
	srv := httptest.NewServer(tr.Handler())
	defer srv.Close()

	_, body := get(t, srv.URL+"?window=1h&format=json")
	var rep insights.Report
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		t.Fatal(err)
	}
	var shown []string
	for _, c := range rep.Candidates {
		shown = append(shown, c.Tenant)
	}
	var want []string
	for _, s := range tenants {
		want = append(want, s)
	}
	slices.Sort(shown)
	slices.Sort(want)
	if !slices.Equal(shown, want) {
		t.Fatalf("the JSON shows %q, want %q", shown, want)
	}
	if !utf8.ValidString(body) || strings.Contains(body, `\ufffd`) || strings.Contains(body, "\u202E") {
		t.Fatalf("the JSON holds invalid UTF-8, a replacement or a bidi control:\n%s", body)
	}

	_, page := get(t, srv.URL+"?window=1h")
	if !utf8.ValidString(page) || strings.ContainsAny(page, "\u202E\u200B\uFFFD") {
		t.Fatal("the page holds invalid UTF-8, a replacement character or an invisible control")
	}
	for _, s := range tenants {
		if !strings.Contains(page, `data-tenant="`+htmlEscape(s)+`"`) {
			t.Errorf("the page does not show %s", s)
		}
	}
}

func htmlEscape(s string) string {
	return strings.NewReplacer(`&`, "&amp;", `<`, "&lt;", `>`, "&gt;", `"`, "&#34;", `'`, "&#39;", "+", "&#43;").Replace(s)
}
