//go:build unix

package redisstore

import (
	"errors"
	"net"
	"os"
	"syscall"
	"time"
)

// wrapLate returns conn with its reads recovering a late-read reply, if it
// is a socket.
func wrapLate(conn net.Conn) net.Conn {
	if _, done := conn.(*lateConn); done {
		return conn
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return conn // TLS, for one: its records cannot be read in part
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return conn
	}
	return &lateConn{Conn: conn, raw: raw}
}

type lateConn struct {
	net.Conn
	raw syscall.RawConn
}

// SyscallConn lets go-redis check an idle connection's health, as it does
// for the socket itself.
func (c *lateConn) SyscallConn() (syscall.RawConn, error) { return c.raw, nil }

func (c *lateConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n == 0 && errors.Is(err, os.ErrDeadlineExceeded) {
		if m := c.readWaiting(p); m > 0 {
			return m, nil
		}
	}
	return n, err
}

// Write writes p. A write that the scheduler ran only after its deadline,
// so that none of p went out, is made then if the socket takes all of p
// at once: the store's timeout counts from the write, which had not
// happened.
func (c *lateConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if n == 0 && errors.Is(err, os.ErrDeadlineExceeded) {
		if n = c.writeNow(p); n == len(p) {
			err = nil
		}
	}
	return n, err
}

// writeNow writes what of p the socket takes now, without waiting, as
// readWaiting reads.
func (c *lateConn) writeNow(p []byte) int {
	if c.SetWriteDeadline(time.Time{}) != nil {
		return 0
	}
	n := 0
	_ = c.raw.Write(func(fd uintptr) bool {
		n, _ = syscall.Write(int(fd), p)
		return true // one try: the socket is non-blocking
	})
	_ = c.SetWriteDeadline(pastDeadline)
	return max(n, 0)
}

// readWaiting reads what the socket holds now, without waiting. The read
// deadline has passed, and the runtime refuses reads past it, so it is
// lifted for the one read.
func (c *lateConn) readWaiting(p []byte) int {
	if c.SetReadDeadline(time.Time{}) != nil {
		return 0
	}
	n := 0
	_ = c.raw.Read(func(fd uintptr) bool {
		n, _ = syscall.Read(int(fd), p)
		return true // one try: the socket is non-blocking
	})
	_ = c.SetReadDeadline(pastDeadline)
	return max(n, 0)
}
