package adapterkit_test

import (
	"net/netip"
	"testing"

	"github.com/tollgate-go/tollgate/core/adapterkit"
)

func TestForwardedClientIP(t *testing.T) {
	proxy := netip.MustParseAddr("10.1.1.1")
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	for _, tc := range []struct {
		name string
		xff  []string
		want string
	}{
		{"one hop", []string{"198.51.100.4"}, "198.51.100.4"},
		// Empty elements list no hop: a proxy that appended nothing is
		// not the client, and neither is the proxy that sent them.
		{"trailing empty elements", []string{"198.51.100.4,,"}, "198.51.100.4"},
		{"empty elements between", []string{"6.6.6.6, , 198.51.100.4 , ,"}, "198.51.100.4"},
		{"only empty elements", []string{", ,"}, "10.1.1.1"},
		{"an empty header", []string{"198.51.100.4", ""}, "198.51.100.4"},
		{"trusted hops skipped", []string{"198.51.100.4, 10.2.2.2,"}, "198.51.100.4"},
		{"garbage stops the walk", []string{"198.51.100.4, garbage, 10.2.2.2"}, "10.2.2.2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := adapterkit.ForwardedClientIP(proxy, tc.xff, "", trusted).String(); got != tc.want {
				t.Errorf("X-Forwarded-For %q: client %s, want %s", tc.xff, got, tc.want)
			}
		})
	}
}

func TestIPKeyGroupsIPv6By64(t *testing.T) {
	key := func(s string) string { return adapterkit.IPKey(netip.MustParseAddr(s)) }
	a, b, c := key("2001:db8:1:2:aaaa::1"), key("2001:db8:1:2:bbbb::9"), key("2001:db8:1:3::1")
	if a != b || a == c || a != "2001:db8:1:2::/64" {
		t.Errorf("keys %q %q %q: one /64 must share a key, another must not", a, b, c)
	}
	if k := key("198.51.100.4"); k != "198.51.100.4" {
		t.Errorf("IPv4 key %q", k)
	}
	if k := key("::ffff:198.51.100.4"); k != "198.51.100.4" {
		t.Errorf("mapped IPv4 key %q", k)
	}
}
