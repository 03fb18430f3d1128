package redistest

import (
	"net"
	"sync"
	"testing"
	"time"
)

// A Proxy is a TCP proxy on a loopback port in front of a Redis (or any
// TCP server), that injects faults a test turns on and off while traffic
// flows:
//
//   - SetLatency delays every chunk of bytes, each way on its own: a reply
//     reaches the client toClient after the server sent it, a command
//     reaches the server toServer after the client sent it. A round trip
//     thus takes the server's own time plus toServer + toClient. The delay
//     is a pipe's, not a bandwidth limit: a pipelined batch arrives whole,
//     late by the same amount, and bytes stay in order.
//   - Silence makes the proxy accept connections and read what clients
//     send, but forward nothing either way, as a stalled server or a
//     network partition: no reply, no error, no close. Resume forwards
//     again, held bytes first, in order.
//   - Cut closes every open connection, both sides, as a server restart or
//     a dropped link would; new connections are accepted as before.
//     Silence then Cut drops what was held.
//   - SetTarget sends new connections elsewhere (a promoted replica).
//
// Accepted and Open count connections, so that a test can assert that a
// client did not reconnect. Late tells how far past their due time the
// proxy, which shares the test's CPUs, wrote bytes it delayed. The Proxy
// is closed, and its connections cut, when the test ends. Its methods are
// safe for concurrent use.
type Proxy struct {
	l  net.Listener
	wg sync.WaitGroup

	mu        sync.Mutex
	target    string
	toServer  time.Duration
	toClient  time.Duration
	silent    bool
	changed   chan struct{} // closed and replaced whenever silent or a latency changes
	conns     map[*proxyConn]struct{}
	accepted  int
	late      time.Duration
	closed    bool
	dialError error
}

// NewProxy starts a proxy on a free loopback port in front of target
// (host:port). It forwards at once, without latency.
func NewProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{l: l, target: target, changed: make(chan struct{}), conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

// Addr returns the address clients dial: 127.0.0.1 and the proxy's port.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// SetLatency sets the delay added to every chunk of bytes from now on:
// toServer to what clients send, toClient to what the server answers.
// Bytes already read keep the delay they were read with.
func (p *Proxy) SetLatency(toServer, toClient time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.toServer, p.toClient = max(toServer, 0), max(toClient, 0)
	p.notifyLocked()
}

// Latency returns the delays that SetLatency set.
func (p *Proxy) Latency() (toServer, toClient time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.toServer, p.toClient
}

// Silence stops forwarding, both ways, on every connection, open or new,
// until Resume; connections are still accepted and read from.
func (p *Proxy) Silence() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.silent = true
	p.notifyLocked()
}

// Resume ends Silence: what was held is forwarded, in order, at once or
// when its latency has passed.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.silent = false
	p.notifyLocked()
}

// Cut closes every open connection, client side and server side, and
// returns how many it closed.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	conns := p.conns
	p.conns = map[*proxyConn]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		c.close()
	}
	return len(conns)
}

// SetTarget makes new connections go to target; open ones stay where they
// are (Cut them to move every client).
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
}

// Late returns the most that a delayed chunk was written after its due
// time, since the proxy started or since the last call of Late: a starved
// test process makes a slower network than the one SetLatency asked for.
func (p *Proxy) Late() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	late := p.late
	p.late = 0
	return late
}

// Accepted returns how many connections the proxy has accepted since it
// started.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Open returns how many connections are open now.
func (p *Proxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// DialError returns the last error met dialling the target, or nil. A
// client whose connection the target refused sees its connection closed.
func (p *Proxy) DialError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dialError
}

// Close stops accepting, cuts every connection and waits for the proxy's
// goroutines to end.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.l.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// hold reports whether forwarding is held now, and the channel that is
// closed at the next change of the fault settings.
func (p *Proxy) hold() (bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.silent, p.changed
}

func (p *Proxy) delay(toServer bool) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if toServer {
		return p.toServer
	}
	return p.toClient
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.accepted++
		p.mu.Unlock()
		// The dial is on the accepting goroutine: a local target answers
		// at once, and connections then reach the server in the order
		// clients made them.
		server, err := net.DialTimeout("tcp", target, 5*time.Second)
		if err != nil {
			p.mu.Lock()
			p.dialError = err
			p.mu.Unlock()
			client.Close()
			continue
		}
		c := &proxyConn{client: client, server: server, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.close()
			return
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		toServer, toClient := make(chan chunk, 1024), make(chan chunk, 1024)
		p.wg.Add(4)
		go p.read(c, client, toServer, true)
		go p.write(c, server, toServer)
		go p.read(c, server, toClient, false)
		go p.write(c, client, toClient)
	}
}

// A proxyConn is one client connection and its connection to the target.
type proxyConn struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{}
}

func (c *proxyConn) close() {
	c.once.Do(func() {
		close(c.done)
		c.client.Close()
		c.server.Close()
	})
}

// A chunk is what one read returned, and when it may be written on.
type chunk struct {
	data    []byte
	due     time.Time
	delayed bool
}

// read reads from src and queues what it reads with its due time.
func (p *Proxy) read(c *proxyConn, src net.Conn, out chan<- chunk, toServer bool) {
	defer p.wg.Done()
	defer close(out)
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			delay := p.delay(toServer)
			ck := chunk{data: append([]byte(nil), buf[:n]...), due: time.Now().Add(delay), delayed: delay > 0}
			select {
			case out <- ck:
			case <-c.done:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// write writes each queued chunk to dst once it is due and the proxy is not
// silent. When the source is done and its bytes are written, or a write
// fails, it closes the connection: the other side learns as it would from
// the server or client itself.
func (p *Proxy) write(c *proxyConn, dst net.Conn, in <-chan chunk) {
	defer p.wg.Done()
	defer p.forget(c)
	for {
		var ck chunk
		var ok bool
		select {
		case ck, ok = <-in:
			if !ok {
				return
			}
		case <-c.done:
			return
		}
		held := false // by Silence, which makes it late on purpose
		for {
			silent, changed := p.hold()
			if silent {
				held = true
				select {
				case <-changed:
					continue
				case <-c.done:
					return
				}
			}
			wait := time.Until(ck.due)
			if wait <= 0 {
				break
			}
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-changed: // Silence while waiting holds this chunk too
				t.Stop()
			case <-c.done:
				t.Stop()
				return
			}
		}
		if late := time.Since(ck.due); ck.delayed && !held && late > 0 {
			p.mu.Lock()
			p.late = max(p.late, late)
			p.mu.Unlock()
		}
		if _, err := dst.Write(ck.data); err != nil {
			return
		}
	}
}

// forget closes c and drops it from the open connections.
func (p *Proxy) forget(c *proxyConn) {
	c.close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}
