package redisstore

import (
	"net"
	"time"
)

// WithTestClock makes the script read its time from now instead of Redis's
// TIME, and the Store look quota periods up at it, so that tests can step
// time exactly.
func WithTestClock(now func() time.Time) Option {
	return func(c *config) { c.clock = now }
}

// WithProcessClock replaces the process's clock, around which the Store
// looks quota periods up, and leaves decisions on Redis's TIME: a replica
// whose clock is off.
func WithProcessClock(now func() time.Time) Option {
	return func(c *config) { c.wall = now }
}

// WithScript makes the Store run src instead of apply.lua.
func WithScript(src string) Option {
	return func(c *config) { c.script = src }
}

// ScriptSource is apply.lua.
var ScriptSource = applySource

// RedisKey exposes the key scheme.
func RedisKey(prefix, tenant string) string { return redisKey(prefix, tenant) }

// MaxRawTenant is the longest tenant ID used in a key as it is.
const MaxRawTenant = maxRawTenant

// WrapLate is the dial hook's wrapping of a connection.
func WrapLate(conn net.Conn) net.Conn { return wrapLate(conn) }
