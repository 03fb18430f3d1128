package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// epochScript reads the epoch key, a hash of a random id and a counter, and
// bumps the counter. A missing key (Redis restarted without persistence, was
// flushed, or evicted it) is created with the caller's proposed id.
const epochScript = `
local id = redis.call('HGET', KEYS[1], 'id')
if not id then
  id = ARGV[1]
  redis.call('HSET', KEYS[1], 'id', id)
end
return {id, redis.call('HINCRBY', KEYS[1], 'n', 1)}
`

// An epochState notices that Redis lost data, so that the denial cache does
// not go on denying from buckets Redis no longer has. Every round trip made
// while the cache holds anything (and the first one) carries epochScript in
// its pipeline, so the cache is emptied within one round trip of the loss
// being visible:
//
//   - a new id: the key was gone, so everything else may be too (a restart
//     without persistence, FLUSHDB, FLUSHALL);
//   - a counter that did not grow since a round trip that left after the
//     previous answer came back: the server lost writes that this Store saw
//     it make (a failover to a replica that missed them). Redis replicates
//     in order, so a server that kept the counter's last bump kept every
//     write before it, among them those the cache learned from.
//
// A replica whose cached denials answer all its traffic makes no round
// trips, so while the cache holds anything the subscription's goroutine
// sends the check on its own whenever none went out for epochEvery.
type epochState struct {
	known   atomic.Bool
	last    atomic.Int64 // when the latest answer came back, µs on the monotonic clock
	probing atomic.Bool
	mu      sync.Mutex
	id      string
	n       int64
	at      int64 // local time when n came back
	self    string
}

// An epochCheck is the epoch script's command in one round trip.
type epochCheck struct{ cmd *redis.Cmd }

// check returns the check that the next round trip must carry, or nil.
func (e *epochState) check(s *Store) *epochCheck {
	if s.cache == nil || e.known.Load() && s.cache.len() == 0 {
		return nil
	}
	return &epochCheck{}
}

func (c *epochCheck) queue(ctx context.Context, pipe redis.Pipeliner, s *Store) {
	s.epoch.mu.Lock()
	if s.epoch.self == "" {
		var b [12]byte
		_, _ = rand.Read(b[:])
		s.epoch.self = hex.EncodeToString(b[:])
	}
	self := s.epoch.self
	s.epoch.mu.Unlock()
	c.cmd = pipe.Eval(ctx, epochScript, []string{s.epochKey}, self)
}

// learn reads the check's answer, for a round trip sent at sent (µs on the
// monotonic clock), and empties the cache if Redis lost data.
func (e *epochState) learn(s *Store, c *epochCheck, sent int64) {
	if c.cmd == nil {
		return
	}
	vals, err := c.cmd.Slice()
	if err != nil || len(vals) != 2 {
		return
	}
	id, ok1 := vals[0].(string)
	n, ok2 := vals[1].(int64)
	if !ok1 || !ok2 {
		return
	}
	now := micros(s.mono())
	e.mu.Lock()
	lost := e.known.Load() && (id != e.id || sent > e.at && n <= e.n)
	if lost || id != e.id || n > e.n {
		e.id, e.n, e.at = id, n, now
	}
	e.known.Store(true)
	e.last.Store(now)
	e.mu.Unlock()
	if lost {
		s.cache.clear()
	}
}

// epochEvery is the longest a Store whose cache holds anything goes without
// checking the epoch: with the probe's own round trip, a replica learns of
// lost data within about epochEvery + epochEvery/2 + a round trip.
const epochEvery = 50 * time.Millisecond

// probe sends the epoch check on its own if none went out for epochEvery.
// A probe that Redis does not answer blocks only its own goroutine.
func (e *epochState) probe(s *Store) {
	if micros(s.mono())-e.last.Load() < epochEvery.Microseconds() || !e.probing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer e.probing.Store(false)
		chk := &epochCheck{}
		ctx := context.Background()
		pipe := s.client.Pipeline()
		chk.queue(ctx, pipe, s)
		sent := micros(s.mono())
		_, _ = pipe.Exec(ctx)
		e.learn(s, chk, sent)
	}()
}
