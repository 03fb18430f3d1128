package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// A respConn is the least of a Redis client this package needs (PING, SCAN,
// UNLINK, CLUSTER, INFO): RESP2 requests and replies, one at a time, so the
// module stays free of go-redis.
type respConn struct {
	c       net.Conn
	r       *bufio.Reader
	timeout time.Duration // per command, for the whole write and reply
}

// errorReply is an error reply of the server (-ERR ..., -LOADING ...).
type errorReply string

func (e errorReply) Error() string { return string(e) }

func dialRESP(addr string, timeout time.Duration) (*respConn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	return &respConn{c: c, r: bufio.NewReader(c), timeout: timeout}, nil
}

func (c *respConn) Close() error { return c.c.Close() }

// do sends one command and returns its reply: string, int64, []any, nil
// (a null reply), or an errorReply as the error.
func (c *respConn) do(args ...string) (any, error) {
	if err := c.c.SetDeadline(time.Now().Add(c.timeout)); err != nil {
		return nil, err
	}
	if err := c.send(args...); err != nil {
		return nil, err
	}
	return c.read()
}

func (c *respConn) send(args ...string) error {
	b := make([]byte, 0, 64)
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, '\r', '\n')
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, '\r', '\n')
		b = append(b, a...)
		b = append(b, '\r', '\n')
	}
	_, err := c.c.Write(b)
	return err
}

func (c *respConn) read() (any, error) {
	line, err := c.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("redistest: malformed reply line %q", line)
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '+':
		return body, nil
	case '-':
		return nil, errorReply(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 {
			return nil, fmt.Errorf("redistest: malformed bulk length %q", body)
		}
		if n == -1 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 {
			return nil, fmt.Errorf("redistest: malformed array length %q", body)
		}
		if n == -1 {
			return nil, nil
		}
		items := make([]any, n)
		for i := range items {
			item, err := c.read()
			var reply errorReply
			if err != nil && !errors.As(err, &reply) {
				return nil, err
			}
			if err != nil {
				item = reply // an error inside an array (EXEC) is a value
			}
			items[i] = item
		}
		return items, nil
	}
	return nil, fmt.Errorf("redistest: unexpected reply type %q", kind)
}

// command runs one command on a new connection to addr.
func command(addr string, timeout time.Duration, args ...string) (any, error) {
	c, err := dialRESP(addr, timeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.do(args...)
}

// ping reports whether the server at addr answers PING with PONG.
func ping(addr string, timeout time.Duration) error {
	reply, err := command(addr, timeout, "PING")
	if err != nil {
		return err
	}
	if reply != "PONG" {
		return fmt.Errorf("PING answered %v", reply)
	}
	return nil
}

// serverPID returns the process ID that the server at addr reports (INFO
// server), which tells a test's own server from another that took its port.
func serverPID(addr string, timeout time.Duration) (int, error) {
	reply, err := command(addr, timeout, "INFO", "server")
	if err != nil {
		return 0, err
	}
	info, _ := reply.(string)
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("redistest: INFO server names no process_id")
}
