package redisstore

import (
	"context"
	"log/slog"
	"sync"
)

// A repairLog logs each key whose state the script found invalid and
// repaired, once per key (up to maxRepairsLogged keys; past that, one line
// per repair is left out rather than a set kept without bound).
type repairLog struct {
	mu   sync.Mutex
	seen map[string]struct{}
}

const maxRepairsLogged = 10000

func (l *repairLog) report(s *Store, c *call, mask int64) {
	if s.logger == nil {
		return
	}
	for i, r := range c.op.Rules {
		if mask&(1<<i) == 0 {
			continue
		}
		key := ruleKey(c.tenant, r.Sub)
		l.mu.Lock()
		if l.seen == nil {
			l.seen = make(map[string]struct{})
		}
		_, done := l.seen[key]
		if !done && len(l.seen) < maxRepairsLogged {
			l.seen[key] = struct{}{}
		} else {
			done = true
		}
		l.mu.Unlock()
		if done {
			continue
		}
		kind := "token bucket"
		if r.IsQuota() {
			kind = "quota"
		}
		s.logger.LogAttrs(context.Background(), slog.LevelWarn,
			"redisstore: a key held no valid state and was repaired (read as a full bucket or an unused quota)",
			slog.String("key", key), slog.String("rule", kind), slog.String("tenant", c.op.Key))
	}
}
