package adaptertest

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"testing"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/storetest"
)

// A NewClientIPServer starts a server that serves GET /ip, answering 200
// "ok", limited with l and keyed by client address: the adapter's
// TenantFromClientIP(trusted...), with the framework's own settings left at
// their defaults (whatever they believe of X-Forwarded-For). It returns the
// base URL and stops the server in t.Cleanup.
type NewClientIPServer func(t *testing.T, l *tollgate.Limiter, trusted []netip.Prefix) (baseURL string)

// ipPlan gives every address room for the spoofing flood of RunClientIP.
var ipPlan = tollgate.Plan{Name: "by-ip", Limit: tollgate.Limit{Rate: 1.0 / 3600, Burst: 1000}}

// spoofs is how many requests with made-up forwarding headers the flood of
// RunClientIP sends: each must land in the one bucket of the real peer.
const spoofs = 500

// RunClientIP checks an adapter's client-address tenants over real HTTP
// connections, whose peer is 127.0.0.1: forwarding headers are believed
// only from the trusted proxies given, never because the framework would
// believe them, and a client that makes up a new X-Forwarded-For on every
// request still spends one bucket.
func RunClientIP(t *testing.T, newServer NewClientIPServer) {
	start := func(t *testing.T, trusted ...string) (string, *tollgate.Limiter) {
		t.Helper()
		var prefixes []netip.Prefix
		for _, p := range trusted {
			prefixes = append(prefixes, netip.MustParsePrefix(p))
		}
		clock := storetest.NewClock()
		l, err := tollgate.New(storetest.NewModelStore(clock.Now), tollgate.SinglePlan(ipPlan),
			WithClock(clock.Now), tollgate.WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		return newServer(t, l, prefixes) + "/ip", l
	}
	// spent checks that key's bucket is missing n tokens.
	spent := func(t *testing.T, l *tollgate.Limiter, key string, n int64) {
		t.Helper()
		d, err := l.Inspect(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if got := ipPlan.Limit.Burst - d.Remaining; got != n {
			t.Errorf("bucket %q spent %d tokens, want %d", key, got, n)
		}
	}

	t.Run("SpoofedHeadersOneBucket", func(t *testing.T) {
		url, l := start(t)
		for i := range spoofs {
			lie := fmt.Sprintf("203.0.%d.%d", i/250, i%250+1)
			status, h := getHeaders(t, url, "X-Forwarded-For", lie+", 198.51.100.7", "X-Real-IP", lie)
			want := strconv.Itoa(int(ipPlan.Limit.Burst) - 1 - i)
			if status != http.StatusOK || h.Get("X-RateLimit-Remaining") != want {
				t.Fatalf("request %d, X-Forwarded-For %s: status %d, X-RateLimit-Remaining %q; want 200 and %s: one bucket for the peer",
					i+1, lie, status, h.Get("X-RateLimit-Remaining"), want)
			}
		}
		spent(t, l, "127.0.0.1", spoofs)
	})

	t.Run("PeerNotTrusted", func(t *testing.T) {
		url, l := start(t, "10.0.0.0/8", "fd00::/8")
		for _, lie := range []string{"203.0.113.1", "10.1.1.1", "2001:db8::1"} {
			getHeaders(t, url, "X-Forwarded-For", lie, "X-Real-IP", lie)
		}
		spent(t, l, "127.0.0.1", 3)
	})

	t.Run("PeerTrusted", func(t *testing.T) {
		url, l := start(t, "127.0.0.0/8")
		for _, tc := range []struct {
			header []string
			key    string
		}{
			// The proxy appended the address it saw: the rightmost
			// untrusted hop is the client, whatever it claimed.
			{[]string{"X-Forwarded-For", "1.1.1.1, 203.0.113.1"}, "203.0.113.1"},
			{[]string{"X-Forwarded-For", "203.0.113.2, 127.0.0.9"}, "203.0.113.2"},
			{[]string{"X-Forwarded-For", "203.0.113.3", "X-Real-IP", "198.51.100.3"}, "203.0.113.3"},
			{[]string{"X-Real-IP", "203.0.113.4"}, "203.0.113.4"},
			// One IPv6 client holds a /64.
			{[]string{"X-Forwarded-For", "2001:db8:1:2::5"}, "2001:db8:1:2::/64"},
			// Empty elements list no hop: the client is the last
			// address, not the proxy that sent them.
			{[]string{"X-Forwarded-For", "203.0.113.5,,"}, "203.0.113.5"},
			{[]string{"X-Forwarded-For", "203.0.113.6, , 127.0.0.9,"}, "203.0.113.6"},
			{[]string{"X-Forwarded-For", "garbage"}, "127.0.0.1"},
			{nil, "127.0.0.1"},
		} {
			status, _ := getHeaders(t, url, tc.header...)
			if status != http.StatusOK {
				t.Fatalf("%q: status %d, want 200", tc.header, status)
			}
		}
		spent(t, l, "203.0.113.1", 1)
		spent(t, l, "203.0.113.2", 1)
		spent(t, l, "203.0.113.3", 1)
		spent(t, l, "203.0.113.4", 1)
		spent(t, l, "203.0.113.5", 1)
		spent(t, l, "203.0.113.6", 1)
		spent(t, l, "2001:db8:1:2::/64", 1)
		spent(t, l, "127.0.0.1", 2)
		spent(t, l, "1.1.1.1", 0)
	})
}

// getHeaders sends GET url with header given as name, value pairs, and
// returns the status and the response headers.
func getHeaders(t *testing.T, url string, header ...string) (int, http.Header) {
	t.Helper()
	r := do(t, http.MethodGet, url, header...)
	return r.status, r.header
}
