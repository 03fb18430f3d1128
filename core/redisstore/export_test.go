package redisstore

import "time"

// WithTestClock makes the Store read its time from now: the script gets now
// instead of the server's TIME, and the denial cache uses it too (timeouts
// and the breaker keep the real clock). It lets the conformance kit's timing cases be exact.
func WithTestClock(now func() time.Time) Option {
	return func(c *config) { c.localClock, c.scriptClock = now, now }
}

// WithLocalClock replaces the Store's own clock (the denial cache's) and
// leaves decisions on the server's TIME, as a replica whose clock is off
// would run.
func WithLocalClock(now func() time.Time) Option {
	return func(c *config) { c.localClock = now }
}

// WithWallClock replaces the clock around which the Store looks up quota
// periods, and leaves decisions on the server's TIME: a replica whose
// clock is off by hours.
func WithWallClock(now func() time.Time) Option {
	return func(c *config) { c.wallClock = now }
}

// RedisKey exposes the key mapping to the tests.
func RedisKey(prefix, key string) string { return redisKey(prefix, key) }

// Slot exposes the Cluster slot computation to the tests.
func Slot(rkey string) int { return slot(rkey) }

// CachedDenials reports how many buckets the denial cache holds.
func (s *Store) CachedDenials() int { return s.cache.len() }

// MaxRawKey is the longest key used as it is.
const MaxRawKey = maxRawKey

// PrefixOf returns the prefix of s's keys.
func PrefixOf(s *Store) string { return s.prefix }

// Listening reports whether s's denial cache listens for resets, and so
// answers.
func Listening(s *Store) bool { return s.sub.confirmed.Load() }
