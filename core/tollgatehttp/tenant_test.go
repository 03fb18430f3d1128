package tollgatehttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/tollgate-go/tollgate/core/tollgatehttp"
)

func TestClientIP(t *testing.T) {
	proxies, err := tollgatehttp.ParsePrefixes("10.0.0.0/8", "fd00::/8", "192.0.2.7")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		remote  string
		xff     []string
		realIP  string
		trusted bool
		want    string
	}{
		{name: "direct client", remote: "203.0.113.9:5555", want: "203.0.113.9"},
		{name: "spoofed XFF from an untrusted peer", remote: "203.0.113.9:5555", xff: []string{"1.2.3.4"}, trusted: true, want: "203.0.113.9"},
		{name: "spoofed X-Real-IP from an untrusted peer", remote: "203.0.113.9:5555", realIP: "1.2.3.4", trusted: true, want: "203.0.113.9"},
		{name: "no trusted proxies configured", remote: "10.1.1.1:80", xff: []string{"1.2.3.4"}, want: "10.1.1.1"},
		{name: "one trusted proxy", remote: "10.1.1.1:80", xff: []string{"198.51.100.4"}, trusted: true, want: "198.51.100.4"},
		{name: "client prepends a lie", remote: "10.1.1.1:80", xff: []string{"6.6.6.6, 198.51.100.4"}, trusted: true, want: "198.51.100.4"},
		{name: "chain of trusted proxies", remote: "10.1.1.1:80", xff: []string{"198.51.100.4, 10.2.2.2", "192.0.2.7"}, trusted: true, want: "198.51.100.4"},
		{name: "all hops trusted", remote: "10.1.1.1:80", xff: []string{"10.3.3.3"}, trusted: true, want: "10.3.3.3"},
		{name: "garbage hop", remote: "10.1.1.1:80", xff: []string{"198.51.100.4, garbage, 10.2.2.2"}, trusted: true, want: "10.2.2.2"},
		{name: "empty elements", remote: "10.1.1.1:80", xff: []string{"198.51.100.4,,"}, trusted: true, want: "198.51.100.4"},
		{name: "X-Real-IP behind a proxy", remote: "10.1.1.1:80", realIP: "198.51.100.5", trusted: true, want: "198.51.100.5"},
		{name: "IPv6 via proxy with port", remote: "[fd00::1]:443", xff: []string{"[2001:db8:1:2:3:4:5:6]:999"}, trusted: true, want: "2001:db8:1:2:3:4:5:6"},
		{name: "mapped IPv4", remote: "[::ffff:203.0.113.9]:80", want: "203.0.113.9"},
		{name: "unreadable peer", remote: "not-an-address", want: "invalid IP"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = c.remote
			for _, v := range c.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if c.realIP != "" {
				r.Header.Set("X-Real-IP", c.realIP)
			}
			var trusted = proxies
			if !c.trusted {
				trusted = nil
			}
			if got := tollgatehttp.ClientIP(r, trusted).String(); got != c.want {
				t.Errorf("ClientIP = %s, want %s", got, c.want)
			}
		})
	}
	if _, err := tollgatehttp.ParsePrefixes("10.0.0.0/33"); err == nil {
		t.Error("a bad CIDR was accepted")
	}
}

type ctxKey struct{}

type principal struct{ id string }

func (p principal) String() string { return p.id }

func TestTenantFromContext(t *testing.T) {
	get := tollgatehttp.TenantFromContext(ctxKey{})
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	if got := get(r); got != "" {
		t.Errorf("no value: %q", got)
	}
	for v, want := range map[any]string{"acme": "acme", principal{"globex"}: "globex", 42: ""} {
		if got := get(r.WithContext(context.WithValue(r.Context(), ctxKey{}, v))); got != want {
			t.Errorf("value %v: tenant %q, want %q", v, got, want)
		}
	}
}

// FuzzClientIP feeds arbitrary peers and forwarding headers: ClientIP must
// never panic and, from an untrusted peer, must never read the headers.
func FuzzClientIP(f *testing.F) {
	f.Add("10.0.0.1:80", "1.2.3.4, 5.6.7.8", "9.9.9.9")
	f.Add("[::1]:1", ",,,", "")
	f.Add("203.0.113.1:5", "[fe80::1%eth0]:80", "::ffff:1.2.3.4")
	proxies, _ := tollgatehttp.ParsePrefixes("10.0.0.0/8", "::1/128")
	f.Fuzz(func(t *testing.T, remote, xff, realIP string) {
		r := &http.Request{RemoteAddr: remote, Header: http.Header{}}
		r.Header.Set("X-Forwarded-For", xff)
		r.Header.Set("X-Real-Ip", realIP)
		got := tollgatehttp.ClientIP(r, proxies)
		direct := tollgatehttp.ClientIP(&http.Request{RemoteAddr: remote}, nil)
		if direct.IsValid() && !inAny(direct, proxies) && got != direct {
			t.Fatalf("untrusted peer %v: headers changed the client to %v", direct, got)
		}
	})
}

func inAny(a netip.Addr, prefixes []netip.Prefix) bool {
	for _, p := range prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
