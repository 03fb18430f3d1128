package memory

// Sweep drops the idle tenants at once, as the background sweeper does, and
// returns how many it dropped.
func (s *Store) Sweep() int {
	if s.tb == nil {
		return 0
	}
	return s.tb.sweep()
}

// Shards returns how many shards the Store's table has.
func (s *Store) Shards() int { return len(s.tb.shards) }

// NewColliding returns a Store whose tenant IDs hash to one of n values
// (n a power of two), so that most share a hash with others.
func NewColliding(n uint64, opts ...Option) *Store {
	s := New(opts...)
	s.tb.hashMask = n - 1
	return s
}

// SweeperDone returns a channel closed once s's sweeper has stopped. It
// does not keep s reachable.
func SweeperDone(s *Store) <-chan struct{} { return s.stopper.done }

// ProbeLength returns how many entries a lookup of an ID the Store does
// not hold reads, on average over every place in its tables where a probe
// can start.
func ProbeLength(s *Store) float64 {
	probes, homes := 0, 0
	for i := range s.tb.shards {
		sh := &s.tb.shards[i].shard
		sh.mu.Lock()
		if p := sh.entries.Load(); p != nil {
			es := *p
			for h := range es {
				probes++
				for pr := (probe{at: h, mask: len(es) - 1}); es[pr.at].tn.Load() != nil; pr.next() {
					probes++
				}
			}
			homes += len(es)
		}
		sh.mu.Unlock()
	}
	return float64(probes) / float64(max(homes, 1))
}
