package adapterkit

import (
	"net"
	"net/netip"
	"strings"
)

// ForwardedClientIP returns the address of the client that sent a request:
// peer is the TCP peer's address, forwardedFor the values of the
// X-Forwarded-For headers in order, and realIP the X-Real-IP header. The
// peer is the client unless it is one of trustedProxies; only then are the
// headers read, X-Forwarded-For from the right, skipping trusted proxies and
// empty elements, so a client can not pick its own address by sending them.
// It returns the zero Addr when no address can be read.
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
				hop = strings.TrimSpace(hop)
				if hop == "" {
					// "a,,b" and "a," list no hop there: a proxy
					// that appended nothing, not a garbled one.
					continue
				}
				a := ParseHostAddr(hop)
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
		if a := ParseHostAddr(strings.TrimSpace(realIP)); a.IsValid() {
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

// ParseHostAddr parses "ip", "ip:port" or "[ipv6]:port", as a peer address
// or a forwarding header gives it, dropping any zone and unmapping
// IPv4-in-IPv6. It returns the zero Addr for anything else.
func ParseHostAddr(s string) netip.Addr {
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

// IPKey returns the tenant key of a client address: the address itself for
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
