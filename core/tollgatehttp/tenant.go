package tollgatehttp

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// TenantFromHeader returns a tenant function for WithTenant that reads the
// header name. Use it only behind a gateway that sets the header from the
// authenticated principal: a client can put anything in a header.
func TenantFromHeader(name string) func(*http.Request) string {
	key := http.CanonicalHeaderKey(name)
	return func(r *http.Request) string { return HeaderValue(r.Header, key) }
}

// HeaderValue returns the first value of the header key in h, or "". key
// must be in canonical form (http.CanonicalHeaderKey): HeaderValue is
// h.Get without the canonicalisation that Get repeats on every call, a
// tenth of the time tollgate adds to a request.
func HeaderValue(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// TenantFromContext returns a tenant function for WithTenant that reads the
// request context value of key, as set by the application's authentication
// middleware. The value must be a string or a fmt.Stringer; anything else,
// or no value, is a missing tenant.
func TenantFromContext(key any) func(*http.Request) string {
	return func(r *http.Request) string {
		return TenantString(r.Context().Value(key))
	}
}

// TenantString returns v as a tenant ID: v itself if it is a string, its
// String method's result if it is a fmt.Stringer, and "" otherwise. The
// adapters use it for values found in framework contexts.
func TenantString(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case fmt.Stringer:
		return t.String()
	}
	return ""
}

// TenantFromClientIP returns a tenant function for WithTenant that keys
// each request by its client address, as ClientIP finds it, grouped by
// IPKey. Requests whose address can not be read count as missing a tenant.
func TenantFromClientIP(trustedProxies ...netip.Prefix) func(*http.Request) string {
	return func(r *http.Request) string {
		if ip := ClientIP(r, trustedProxies); ip.IsValid() {
			return IPKey(ip)
		}
		return ""
	}
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
			return nil, fmt.Errorf("tollgate: trusted proxy %q is neither a CIDR prefix nor an address", c)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// ClientIP returns the address of the client that sent r. The direct peer
// (r.RemoteAddr) is the client unless it is one of trustedProxies; only then
// are X-Forwarded-For and X-Real-IP read, from the right, skipping trusted
// proxies, so a client can not pick its own address by sending the headers.
// It returns the zero Addr when no address can be read.
func ClientIP(r *http.Request, trustedProxies []netip.Prefix) netip.Addr {
	return ForwardedClientIP(parseHostAddr(r.RemoteAddr), r.Header["X-Forwarded-For"], r.Header.Get("X-Real-Ip"), trustedProxies)
}

// ForwardedClientIP is ClientIP for frameworks that do not use net/http
// requests: peer is the TCP peer's address, forwardedFor the values of the
// X-Forwarded-For headers in order, and realIP the X-Real-IP header.
func ForwardedClientIP(peer netip.Addr, forwardedFor []string, realIP string, trustedProxies []netip.Prefix) netip.Addr {
	peer = peer.Unmap().WithZone("")
	if !peer.IsValid() || !trusted(peer, trustedProxies) {
		return peer
	}
	client := peer
	if len(forwardedFor) > 0 {
		// Several headers are one list, in order.
		for i := len(forwardedFor) - 1; i >= 0; i-- {
			hops := forwardedFor[i]
			for hops != "" {
				var hop string
				if j := strings.LastIndexByte(hops, ','); j >= 0 {
					hops, hop = hops[:j], hops[j+1:]
				} else {
					hops, hop = "", hops
				}
				a := parseHostAddr(strings.TrimSpace(hop))
				if !a.IsValid() {
					// Nothing left of a garbled entry can be
					// trusted: the last good hop is the client.
					return client
				}
				client = a
				if !trusted(a, trustedProxies) {
					return client
				}
			}
		}
		return client
	}
	if realIP != "" {
		if a := parseHostAddr(strings.TrimSpace(realIP)); a.IsValid() {
			return a
		}
	}
	return client
}

func trusted(a netip.Addr, prefixes []netip.Prefix) bool {
	for _, p := range prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseHostAddr parses "ip", "ip:port" or "[ipv6]:port", dropping any zone
// and unmapping IPv4-in-IPv6.
func parseHostAddr(s string) netip.Addr {
	if s == "" || len(s) > 64 {
		return netip.Addr{}
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone("")
	}
	host, _, err := net.SplitHostPort(s)
	if err != nil {
		return netip.Addr{}
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap().WithZone("")
}

// IPKey returns the bucket key of a client address: the address itself for
// IPv4, and its /64 network for IPv6, since one IPv6 client usually holds a
// whole /64 and could otherwise rotate through countless addresses.
func IPKey(a netip.Addr) string {
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

// IPKeyString is IPKey for an address in text, as web frameworks return it;
// it returns "" if s is not an address.
func IPKeyString(s string) string {
	if a := parseHostAddr(strings.TrimSpace(s)); a.IsValid() {
		return IPKey(a)
	}
	return ""
}
