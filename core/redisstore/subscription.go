package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A subscription listens, while the denial cache holds anything, to the
// channel on which every Store with the same prefix announces resets and
// cancels (the script publishes the tenant's key), and makes the cache
// forget those tenants. The cache answers nothing until the subscription is
// confirmed, and it is emptied at each confirmation (the first, and after
// go-redis reconnects), so an announcement made while no one listened
// cannot leave a stale denial behind.
type subscription struct {
	s         *Store
	mu        sync.Mutex
	running   bool
	confirmed atomic.Bool
}

// idleCheck is how often a subscription looks whether the cache is empty,
// and ends if it is.
const idleCheck = 10 * time.Second

func (sub *subscription) init(s *Store) { sub.s = s }

// want starts the subscription unless it runs.
func (sub *subscription) want() {
	sub.mu.Lock()
	if sub.running {
		sub.mu.Unlock()
		return
	}
	sub.running = true
	sub.mu.Unlock()
	go sub.run()
}

func (sub *subscription) run() {
	s := sub.s
	ps := s.client.Subscribe(context.Background(), s.channel)
	defer ps.Close()
	msgs := ps.ChannelWithSubscriptions(redis.WithChannelSize(1024))
	tick := time.NewTicker(idleCheck)
	defer tick.Stop()
	epoch := time.NewTicker(epochEvery / 2)
	defer epoch.Stop()
	for {
		select {
		case <-epoch.C:
			s.epoch.probe(s)
		case m, ok := <-msgs:
			if !ok {
				sub.stop()
				return
			}
			switch m := m.(type) {
			case *redis.Subscription:
				if m.Kind == "subscribe" {
					sub.confirmed.Store(false)
					s.cache.clear()
					sub.confirmed.Store(true)
				}
			case *redis.Message:
				s.cache.forget(tenantOf(m.Payload))
			}
		case <-tick.C:
			sub.mu.Lock()
			if s.cache.len() == 0 {
				sub.running = false
				sub.confirmed.Store(false)
				sub.mu.Unlock()
				return
			}
			sub.mu.Unlock()
		}
	}
}

func (sub *subscription) stop() {
	sub.mu.Lock()
	sub.running = false
	sub.confirmed.Store(false)
	sub.mu.Unlock()
}

// tenantOf returns the tenant's main key of any of its rules' keys: up to
// the end of the hash tag.
func tenantOf(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] == '}' {
			return key[:i+1]
		}
	}
	return key
}
