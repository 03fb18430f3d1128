package admin_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core/redistest"
)

// TestChangesReachTheOtherReplica: replicas on one Redis, each with its
// own admin handler. A change made through one is in another's API
// answers within 100 ms (median and worst of 100 tries), and in the
// decisions of a third, whose API nobody reads (reading it loads the
// overrides), within 100 ms too; a replica started later shows it at
// once.
func TestChangesReachTheOtherReplica(t *testing.T) {
	prefix := redistest.Prefix(t)
	a, b, quiet := newReplica(t, prefix, nil), newReplica(t, prefix, nil), newReplica(t, prefix, nil)

	// make check runs this package alone, after the others; a run whose
	// worst try a stall of the machine still pushed past the bound is
	// tried again, up to three times. Replicas that reload later than the
	// bound miss it in all three. With -short (make test, every package at
	// once on the same CPUs) the changes must arrive, and the times are
	// only logged.
	for attempt := 1; ; attempt++ {
		bad := propagationRun(t, a, b, quiet)
		if bad == "" || testing.Short() {
			break
		}
		if attempt == 3 {
			t.Errorf("%s, in each of %d runs", bad, attempt)
			break
		}
	}

	// A reset through b: a's API and Limiter see every policy full at
	// once, since the state is shared.
	take(t, a.limiter, "hooli", 25)
	start := time.Now()
	decodeState(t, b.api(t, "POST", "tenants/hooli/reset", `{"reason":"throttled by mistake"}`))
	if s := decodeState(t, a.api(t, "GET", "tenants/hooli", "")); s.Policies[0].Remaining != 20 {
		t.Fatalf("a after a reset through b: %+v", s)
	}
	t.Logf("a reset through one replica, in the other's API: %v", time.Since(start))

	// Clearing through b.
	decodeState(t, b.api(t, "DELETE", "tenants/initech/override?reason=done", ""))
	if s := decodeState(t, a.api(t, "GET", "tenants/initech", "")); s.Plan != "startup" || s.Override != nil {
		t.Fatalf("a after clearing through b: %+v", s)
	}

	// A replica started later has the change log and the overrides from
	// its first answer.
	decodeState(t, a.api(t, "PUT", "tenants/globex/override", `{"plan":"enterprise","expires_in_seconds":600,"reason":"launch"}`))
	c := newReplica(t, prefix, nil)
	if s := decodeState(t, c.api(t, "GET", "tenants/globex", "")); s.Plan != "enterprise" || s.Override == nil || s.Override.Reason != "launch" {
		t.Fatalf("a replica started later: %+v", s)
	}
	if d := take(t, c.limiter, "globex", 1); d.Plan != "enterprise" {
		t.Fatalf("a replica started later decides on %s", d.Plan)
	}
	changes, err := c.limiter.Changes(t.Context())
	if err != nil || len(changes) != 100 || changes[0].Tenant != "globex" || changes[0].By != "admin" {
		t.Fatalf("the change log from a replica started later: %d changes, %v", len(changes), err)
	}
}

// propagationRun sets an override through a 100 times, alternating two
// plans, and times how long b's API and quiet's decisions take to show
// each. It logs the medians and the worst, and returns what missed the
// 100 ms bound, if anything.
func propagationRun(t *testing.T, a, b, quiet *replica) string {
	t.Helper()
	var api, decisions []time.Duration
	for i := range 100 {
		want := []string{"growth", "enterprise"}[i%2]
		start := time.Now()
		if s := decodeState(t, a.api(t, "PUT", "tenants/initech/override", fmt.Sprintf(`{"plan":%q,"reason":"try %d"}`, want, i))); s.Plan != want {
			t.Fatalf("try %d: the replica that made the change shows %s", i, s.Plan)
		}
		for decodeState(t, b.api(t, "GET", "tenants/initech", "")).Plan != want {
			if time.Since(start) > 5*time.Second {
				t.Fatalf("try %d: the other replica's API never showed %s", i, want)
			}
		}
		api = append(api, time.Since(start))
		for take(t, quiet.limiter, "initech", 1).Plan != want {
			if time.Since(start) > 5*time.Second {
				t.Fatalf("try %d: the other replica's Limiter never applied %s", i, want)
			}
			time.Sleep(time.Millisecond)
		}
		decisions = append(decisions, time.Since(start))
	}
	bad := ""
	for _, m := range []struct {
		what string
		d    []time.Duration
	}{{"in the other replica's API", api}, {"in a third replica's decisions", decisions}} {
		slices.Sort(m.d)
		median, worst := m.d[len(m.d)/2], m.d[len(m.d)-1]
		t.Logf("an override set through one replica's API, %s: median %v, worst %v of 100", m.what, median, worst)
		if worst > 100*time.Millisecond {
			bad = fmt.Sprintf("%s: worst %v, want at most 100 ms", m.what, worst)
		}
	}
	return bad
}
