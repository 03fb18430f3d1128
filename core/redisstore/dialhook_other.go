//go:build !unix

package redisstore

import "net"

func wrapLate(conn net.Conn) net.Conn { return conn }
