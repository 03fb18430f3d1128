package redisstore

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/tollgate-go/tollgate/core/storekit"
)

// applySource is the script that applies an Op. Its comments say what it
// takes and answers; encode and settle are its other side.
//
//go:embed apply.lua
var applySource string

// A script is the Lua source a Store runs and its SHA-1, by which EVALSHA
// names it.
type script struct{ src, sha string }

func newScript(src string) script {
	if src == "" {
		src = applySource
	}
	sum := sha1.Sum([]byte(src))
	return script{src: src, sha: hex.EncodeToString(sum[:])}
}

// apply runs op on key through e: it encodes op as the script's arguments,
// waits for the answer, and settles op from it.
func (s *Store) apply(ctx context.Context, op *storekit.Op, key string, e *endpoint) error {
	c := calls.Get().(*call)
	// What a request held must come back even when its caller has gone.
	c.keep = op.Kind == storekit.Release || op.Kind == storekit.Cancel
	when := s.estimate()
	// The script refuses a quota period that does not hold Redis's time
	// and answers with that time; a period can only end between two tries
	// at its very boundary, so the third try is the last.
	for range 3 {
		c.encode(op, key, when)
		if err := e.do(ctx, c); err != nil {
			return err // c may still be in a round trip: it is not reused
		}
		op.Latency += c.latency
		retry, err := s.settle(ctx, op, c)
		if err != nil || !retry {
			calls.Put(c)
			return err
		}
		when = time.UnixMicro(c.now)
	}
	calls.Put(c)
	return unavailable("period", fmt.Errorf("redisstore: the quota periods never held Redis's time, %v", when))
}

// estimate returns the process's estimate of Redis's time.
func (s *Store) estimate() time.Time {
	if s.clock != nil {
		return s.clock()
	}
	return s.wall().Add(time.Duration(s.offset.Load()) * time.Microsecond)
}

// encode fills in c's part of a script call for op on key, with quota
// periods looked up at when, the process's estimate of Redis's time.
func (c *call) encode(op *storekit.Op, key string, when time.Time) {
	mark := ""
	if op.Kind == storekit.Cancel {
		mark = stamp(op.Mark)
	}
	var delay int64
	if op.Kind == storekit.Take {
		delay = min(max(op.MaxDelay, 0), maxDelay).Microseconds()
	}
	c.key, c.sets = key, c.sets[:0]
	c.args = append(c.args[:0], int64(op.Kind), max(op.Cost, 1), delay, mark, op.Lease, op.LeaseTTL.Microseconds(), len(op.Rules))
	for i := range op.Rules {
		c.args = append(c.args, op.Rules[i].Name)
	}
	for i := range op.Rules {
		switch r := &op.Rules[i]; r.Kind {
		case storekit.Quota:
			start, end := r.Period(when)
			c.args = append(c.args, r.Burst, 0, stamp(start.UnixMicro()), stamp(end.UnixMicro()))
		case storekit.InFlight:
			c.args = append(c.args, r.Burst, -1, "", "")
			c.sets = append(c.sets, inFlightKey(key, r.Name))
		default:
			c.args = append(c.args, r.Burst, r.Interval, "", "")
		}
	}
}

// stamp formats a time in microseconds since 1970 as the script keeps
// times: "<seconds>.<six digits>".
func stamp(us int64) string {
	sec, frac := us/1e6, us%1e6
	if frac < 0 {
		sec, frac = sec-1, frac+1e6
	}
	b := make([]byte, 0, 24)
	b = strconv.AppendInt(b, sec, 10)
	b = append(b, '.')
	f := strconv.AppendInt(make([]byte, 0, 8), frac+1e6, 10) // "1xxxxxx"
	return string(append(b, f[1:]...))
}

// settle reads the script's reply in c into op. It returns retry true
// when the script refused the quota periods of the Op: they must be looked
// up again at Redis's time, c.now.
func (s *Store) settle(ctx context.Context, op *storekit.Op, c *call) (retry bool, err error) {
	vals := c.reply
	flag, _ := first(vals).(int64)
	if offset := c.now - c.received.UnixMicro(); s.clock == nil && abs(offset-s.offset.Load()) > 1000 {
		s.offset.Store(offset) // rarely: every caller would write the one cache line
	}
	switch {
	case len(vals) == 1 && flag == 1:
		return true, nil
	case len(vals) == 2 && flag == 2:
		return false, s.callError(ctx, c.key, redisError(fmt.Sprint(vals[1])))
	case len(vals) < 3+4*len(op.Rules) || flag != 0:
		return false, fmt.Errorf("redisstore: the script's reply for %s is malformed: %v", c.key, vals)
	}
	ints := func(i int) int64 { v, _ := vals[i].(int64); return v }
	op.Allowed, op.Delay = ints(1) == 1, micros(ints(2))
	op.Results = op.Results[:0]
	for i := range op.Rules {
		at := 3 + 4*i
		op.Results = append(op.Results, storekit.Result{Allowed: ints(at) == 1, Remaining: ints(at + 1),
			RetryAfter: micros(ints(at + 2)), ResetAfter: micros(ints(at + 3))})
	}
	if op.Kind == storekit.Take && op.Allowed {
		op.Mark = c.now + ints(2)
	}
	if s.logger != nil {
		for _, name := range vals[3+4*len(op.Rules):] {
			s.logger.LogAttrs(ctx, slog.LevelWarn,
				"redisstore: a rule state in Redis was not valid: it was removed, and the rule counted as unused",
				slog.String("key", c.key), slog.Any("rule", name))
		}
	}
	return false, nil
}

func first(vals []any) any {
	if len(vals) == 0 {
		return nil
	}
	return vals[0]
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

func micros(n int64) time.Duration { return time.Duration(n) * time.Microsecond }
