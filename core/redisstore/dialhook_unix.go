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
		if m := ioNow(c.SetReadDeadline, c.raw.Read, syscall.Read, p); m > 0 {
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
		if n = ioNow(c.SetWriteDeadline, c.raw.Write, syscall.Write, p); n == len(p) {
			err = nil
		}
	}
	return n, err
}

// ioNow reads or writes p on the socket once, without waiting, and returns
// the bytes it moved. The deadline that setDeadline sets has passed, and
// the runtime refuses I/O past it, so it is lifted for the one call.
func ioNow(setDeadline func(time.Time) error, raw func(func(fd uintptr) bool) error, op func(fd int, p []byte) (int, error), p []byte) int {
	if setDeadline(time.Time{}) != nil {
		return 0
	}
	n := 0
	_ = raw(func(fd uintptr) bool {
		n, _ = op(int(fd), p)
		return true // one try: the socket is non-blocking
	})
	_ = setDeadline(pastDeadline)
	return max(n, 0)
}
