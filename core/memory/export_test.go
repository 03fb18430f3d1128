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
