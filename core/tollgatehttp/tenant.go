package tollgatehttp

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/tollgate-go/tollgate/core/adapterkit"
)

// TenantFromHeader returns a tenant function for WithTenant that reads the
// header name. Use it only behind a gateway that sets the header from the
// authenticated principal: a client can put anything in a header.
func TenantFromHeader(name string) func(*http.Request) string {
	key := http.CanonicalHeaderKey(name)
	return func(r *http.Request) string { return adapterkit.HeaderValue(r.Header, key) }
}

// TenantFromContext returns a tenant function for WithTenant that reads the
// request context value of key, as set by the application's authentication
// middleware. The value must be a string or a fmt.Stringer; anything else,
// or no value, is a missing tenant.
func TenantFromContext(key any) func(*http.Request) string {
	return func(r *http.Request) string {
		return adapterkit.TenantString(r.Context().Value(key))
	}
}

// TenantFromClientIP returns a tenant function for WithTenant that keys
// each request by its client address, as ClientIP finds it: an IPv4 client
// by its address, an IPv6 client by its /64, since one IPv6 client usually
// holds a whole /64. Requests whose address can not be read count as
// missing a tenant.
func TenantFromClientIP(trustedProxies ...netip.Prefix) func(*http.Request) string {
	return func(r *http.Request) string {
		if ip := ClientIP(r, trustedProxies); ip.IsValid() {
			return adapterkit.IPKey(ip)
		}
		return ""
	}
}

// ClientIP returns the address of the client that sent r. The direct peer
// (r.RemoteAddr) is the client unless it is one of trustedProxies; only then
// are X-Forwarded-For and X-Real-IP read, X-Forwarded-For from the right,
// skipping trusted proxies and empty elements, so a client can not pick its
// own address by sending the headers. It returns the zero Addr when no
// address can be read.
func ClientIP(r *http.Request, trustedProxies []netip.Prefix) netip.Addr {
	return adapterkit.ForwardedClientIP(adapterkit.ParseHostAddr(r.RemoteAddr), r.Header["X-Forwarded-For"],
		adapterkit.HeaderValue(r.Header, "X-Real-Ip"), trustedProxies)
}

// ParsePrefixes parses CIDR strings such as "10.0.0.0/8" or "fd00::/8" for
// TenantFromClientIP; a bare address counts as a single-address prefix.
func ParsePrefixes(cidrs ...string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(cidrs))
	for _, c := range cidrs {
		c = strings.TrimSpace(c)
		if p, err := netip.ParsePrefix(c); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(c)
		if err != nil {
			return nil, fmt.Errorf("tollgatehttp: trusted proxy %q is neither a CIDR prefix nor an address", c)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}
