package redisstore_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/redisstore"
	"github.com/tollgate-go/tollgate/core/storetest"
)

type countHook struct{ n, p atomic.Int64 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.p.Add(1); return next(ctx, cmds) }
}

func TestQuickMoving(t *testing.T) {
	client := newClient(t)
	h := &countHook{}
	client.AddHook(h)
	clock := storetest.NewClock()
	s, _ := redisstore.New(client, redisstore.WithPrefix(testPrefix(t)), redisstore.WithTestClock(clock.Now), redisstore.WithTimeout(5*time.Second))
	limit := tollgate.Limit{Rate: 100, Burst: 50}
	var taken, allowed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := s.Take(context.Background(), "k", limit, 1+int64(w%3))
				taken.Add(1)
				if err == nil && r.Allowed {
					allowed.Add(1)
				}
			}
		}()
	}
	start := time.Now()
	for range 200 {
		for target := taken.Load() + 16; taken.Load() < target; {
			runtime.Gosched()
		}
		clock.Advance(2 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	t.Logf("%v per step, %d takes, %d cmds, %d pipelines", time.Since(start)/200, taken.Load(), h.n.Load(), h.p.Load())
}
