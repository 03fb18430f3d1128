//go:build unix

package redisstore_test

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core/redisstore"
)

// latePair returns the two ends of a loopback connection: the client's,
// plain and as the dial hook wraps it, and the server's. They are closed
// when t ends.
func latePair(t *testing.T) (raw, conn, server net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	raw, err = net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		raw.Close()
		t.Fatal("the listener accepted no connection")
	}
	t.Cleanup(func() {
		server.Close()
		raw.Close()
	})
	return raw, redisstore.WrapLate(raw), server
}

// TestLateRead: a read whose deadline has passed takes the reply that is
// waiting in the socket, as when the runtime ran the deadline's timer
// before it noticed the reply; with nothing waiting it fails at once.
func TestLateRead(t *testing.T) {
	raw, conn, server := latePair(t)

	if _, err := server.Write([]byte("+PONG\r\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	time.Sleep(50 * time.Millisecond) // the reply is in the socket
	conn.SetReadDeadline(time.Now().Add(-time.Second))
	n, err := conn.Read(buf)
	if err != nil || string(buf[:n]) != "+PONG\r\n" {
		t.Fatalf("read past the deadline with a reply waiting: %q, %v", buf[:n], err)
	}
	start := time.Now()
	if n, err := conn.Read(buf); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) > 50*time.Millisecond {
		t.Fatalf("read past the deadline with nothing waiting: %d, %v after %v; want a timeout at once", n, err, time.Since(start))
	}
	// Without the wrapping, the runtime refuses the read.
	server.Write([]byte("+PONG\r\n"))
	time.Sleep(50 * time.Millisecond)
	raw.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := raw.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the plain socket read a reply past its deadline (%v): the test shows nothing", err)
	}
}

// TestLateWrite: a write whose deadline passed before it was made, as when
// the scheduler runs a runner only after the deadline that go-redis set
// just before writing, is made then; the plain socket refuses it.
func TestLateWrite(t *testing.T) {
	raw, conn, server := latePair(t)

	conn.SetWriteDeadline(time.Now().Add(-time.Second))
	cmd := []byte("*1\r\n$4\r\nPING\r\n")
	if n, err := conn.Write(cmd); n != len(cmd) || err != nil {
		t.Fatalf("write past the deadline: %d of %d bytes, %v; want all, no error", n, len(cmd), err)
	}
	server.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, len(cmd))
	if _, err := io.ReadFull(server, got); err != nil || string(got) != string(cmd) {
		t.Fatalf("the server read %q, %v; want %q", got, err, cmd)
	}
	// Without the wrapping, the runtime refuses the write.
	raw.SetWriteDeadline(time.Now().Add(-time.Second))
	if n, err := raw.Write(cmd); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the plain socket wrote past its deadline (%d, %v): the test shows nothing", n, err)
	}
}
