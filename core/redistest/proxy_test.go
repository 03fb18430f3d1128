package redistest

import (
	"errors"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// latencySlack is how much later than the injected latency a round trip
// may take: Redis's own time, and the wake-ups of a loaded two-core
// machine under the race detector.
const latencySlack = 15 * time.Millisecond

// dialProxy opens a RESP connection through p.
func dialProxy(t *testing.T, p *Proxy) *respConn {
	t.Helper()
	c, err := dialRESP(p.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrips times n PINGs on c, sorted.
func roundTrips(t *testing.T, c *respConn, n int) []time.Duration {
	t.Helper()
	rtts := make([]time.Duration, n)
	for i := range rtts {
		start := time.Now()
		if reply, err := c.do("PING"); err != nil || reply != "PONG" {
			t.Fatalf("PING: %v, %v", reply, err)
		}
		rtts[i] = time.Since(start)
	}
	slices.Sort(rtts)
	return rtts
}

func TestProxyLatency(t *testing.T) {
	p := NewProxy(t, Start(t).Addr())
	c := dialProxy(t, p)
	for _, tc := range []struct{ toServer, toClient time.Duration }{
		{0, 0},
		{0, 30 * time.Millisecond},
		{30 * time.Millisecond, 0},
		{10 * time.Millisecond, 20 * time.Millisecond},
		{0, 5 * time.Millisecond},
	} {
		// Set on an open connection: latency changes at run time.
		p.SetLatency(tc.toServer, tc.toClient)
		if s, c := p.Latency(); s != tc.toServer || c != tc.toClient {
			t.Fatalf("Latency = %v, %v after SetLatency(%v, %v)", s, c, tc.toServer, tc.toClient)
		}
		want := tc.toServer + tc.toClient
		rtts := roundTrips(t, c, 15)
		median := rtts[len(rtts)/2]
		t.Logf("latency %v + %v: round trips min %v, median %v, max %v", tc.toServer, tc.toClient, rtts[0], median, rtts[len(rtts)-1])
		if rtts[0] < want {
			t.Errorf("latency %v + %v: a round trip took %v, less than the latency", tc.toServer, tc.toClient, rtts[0])
		}
		if median > want+latencySlack {
			t.Errorf("latency %v + %v: median round trip %v, more than %v late", tc.toServer, tc.toClient, median, latencySlack)
		}
	}
}

// TestProxyLatencyIsPerReply checks that latency delays each reply by the
// same amount, not one after the other: a pipelined batch arrives whole,
// late once, and in order.
func TestProxyLatencyIsPerReply(t *testing.T) {
	p := NewProxy(t, Start(t).Addr())
	c := dialProxy(t, p)
	const n = 200
	const latency = 20 * time.Millisecond
	p.SetLatency(latency, latency)
	key := Prefix(t) + "counter"
	start := time.Now()
	for range n {
		if err := c.send("INCR", key); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= n; i++ {
		reply, err := c.read()
		if err != nil || reply != int64(i) {
			t.Fatalf("reply %d: %v, %v; want %d: replies out of order", i, reply, err, i)
		}
	}
	elapsed := time.Since(start)
	if elapsed < 2*latency || elapsed > 2*latency+4*latencySlack {
		t.Errorf("%d pipelined commands took %v, want about one round trip of %v", n, elapsed, 2*latency)
	}
}

// TestProxySilence checks that a silent proxy accepts and reads but answers
// nothing and forwards nothing, and that Resume delivers what it held.
func TestProxySilence(t *testing.T) {
	srv := Start(t)
	p := NewProxy(t, srv.Addr())
	c := dialProxy(t, p)
	if reply, err := c.do("SET", "k", "1"); err != nil || reply != "OK" {
		t.Fatalf("SET: %v, %v", reply, err)
	}
	p.Silence()
	c.timeout = 300 * time.Millisecond
	_, err := c.do("INCR", "k")
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("INCR through a silent proxy: %v, want a timeout", err)
	}
	// A new connection is accepted, and silent too.
	late := dialProxy(t, p)
	late.timeout = 300 * time.Millisecond
	if _, err := late.do("PING"); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("PING on a connection made while silent: %v, want a timeout", err)
	}
	if p.Accepted() != 2 || p.Open() != 2 {
		t.Errorf("Accepted %d, Open %d; want 2 and 2: silence closes nothing", p.Accepted(), p.Open())
	}
	// Nothing reached the server.
	if v := do(t, srv.Addr(), "GET", "k"); v != "1" {
		t.Fatalf("k = %v while silent, want 1: the INCR reached the server", v)
	}

	p.Resume()
	c.timeout = 5 * time.Second
	c.c.SetDeadline(time.Now().Add(c.timeout))
	if reply, err := c.read(); err != nil || reply != int64(2) {
		t.Fatalf("the held INCR after Resume: %v, %v; want 2", reply, err)
	}
	late.c.SetDeadline(time.Now().Add(5 * time.Second))
	if reply, err := late.read(); err != nil || reply != "PONG" {
		t.Fatalf("the held PING after Resume: %v, %v", reply, err)
	}
	if reply, err := c.do("GET", "k"); err != nil || reply != "2" {
		t.Fatalf("GET after Resume: %v, %v", reply, err)
	}
}

// TestProxySilenceHoldsDelayedReplies: silence that starts while a reply is
// delayed holds that reply too.
func TestProxySilenceHoldsDelayedReplies(t *testing.T) {
	p := NewProxy(t, Start(t).Addr())
	c := dialProxy(t, p)
	p.SetLatency(0, 200*time.Millisecond)
	if err := c.send("PING"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the PONG is now on its way, late
	p.Silence()
	c.c.SetDeadline(time.Now().Add(400 * time.Millisecond))
	if reply, err := c.read(); err == nil {
		t.Fatalf("a reply (%v) came through a silent proxy", reply)
	}
	p.Resume()
	c.c.SetDeadline(time.Now().Add(5 * time.Second))
	if reply, err := c.read(); err != nil || reply != "PONG" {
		t.Fatalf("after Resume: %v, %v", reply, err)
	}
}

func TestProxyCut(t *testing.T) {
	p := NewProxy(t, Start(t).Addr())
	a, b := dialProxy(t, p), dialProxy(t, p)
	for _, c := range []*respConn{a, b} {
		if _, err := c.do("PING"); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.Cut(); n != 2 {
		t.Errorf("Cut closed %d connections, want 2", n)
	}
	for _, c := range []*respConn{a, b} {
		_, err := c.do("PING")
		if closed := errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE); !closed {
			t.Errorf("PING on a cut connection: %v, want EOF or a reset", err)
		}
	}
	if p.Open() != 0 {
		t.Errorf("Open = %d after Cut", p.Open())
	}
	// New connections work as before.
	if _, err := dialProxy(t, p).do("PING"); err != nil {
		t.Fatalf("PING on a new connection after Cut: %v", err)
	}
	if p.Accepted() != 3 {
		t.Errorf("Accepted = %d, want 3", p.Accepted())
	}
}

// TestProxyServerGone: a connection through the proxy closes when the
// server dies, as a direct one would, and new ones are refused (closed).
func TestProxyServerGone(t *testing.T) {
	srv := Start(t)
	p := NewProxy(t, srv.Addr())
	c := dialProxy(t, p)
	if _, err := c.do("PING"); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	if _, err := c.do("PING"); err == nil {
		t.Fatal("PING answered after the server was killed")
	}
	if _, err := dialProxy(t, p).do("PING"); err == nil {
		t.Fatal("PING answered on a new connection to a dead server")
	}
	if p.DialError() == nil {
		t.Error("DialError = nil after a refused dial")
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := dialProxy(t, p).do("PING"); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
}

func TestProxySetTarget(t *testing.T) {
	a, b := Start(t), Start(t)
	p := NewProxy(t, a.Addr())
	port := func(c *respConn) int {
		info, err := c.do("INFO", "server")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info.(string), "\r\n") {
			if v, ok := strings.CutPrefix(line, "tcp_port:"); ok {
				n, _ := strconv.Atoi(v)
				return n
			}
		}
		t.Fatal("no tcp_port in INFO")
		return 0
	}
	before := dialProxy(t, p)
	if _, err := before.do("PING"); err != nil { // connected through to a
		t.Fatal(err)
	}
	p.SetTarget(b.Addr())
	after := dialProxy(t, p)
	if got := port(before); got != a.Port() {
		t.Errorf("an open connection moved to port %d, want it on %d", got, a.Port())
	}
	if got := port(after); got != b.Port() {
		t.Errorf("a new connection went to port %d, want %d", got, b.Port())
	}
}

// TestProxyCloseEndsEverything: Close returns only when every goroutine of
// the proxy is done, its connections closed.
func TestProxyClose(t *testing.T) {
	p := NewProxy(t, Start(t).Addr())
	c := dialProxy(t, p)
	p.Silence()
	if err := c.send("PING"); err != nil {
		t.Fatal(err)
	}
	p.Close()
	c.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.read(); err == nil {
		t.Fatal("a reply after Close")
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("the proxy accepts connections after Close")
	}
}
