package memory_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clock *storetest.Clock) tollgate.Store {
		s := memory.New(memory.WithClock(clock.Now))
		t.Cleanup(func() { s.Close() })
		return s
	})
}

var limit = tollgate.Limit{Rate: 10, Burst: 10} // full again 1s after the last take

func take(t *testing.T, s *memory.Store, key string, cost int64) tollgate.Result {
	t.Helper()
	r, err := s.Take(context.Background(), key, limit, cost)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSweepDropsOnlyFullBuckets(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0))
	for i := 0; i < 1000; i++ {
		take(t, s, fmt.Sprint("idle-", i), 1) // full again after 100ms
	}
	take(t, s, "busy", 10) // full again after 1s
	clock.Advance(500 * time.Millisecond)
	if n := s.Sweep(); n != 1000 {
		t.Fatalf("Sweep dropped %d buckets, want the 1000 full ones", n)
	}
	if st := s.Stats(); st.Keys != 1 || st.Evictions != 0 {
		t.Fatalf("after the sweep %+v, want 1 key and no evictions", st)
	}
	// The busy bucket kept its state; a swept one is the full bucket it was.
	if r := take(t, s, "busy", 6); r.Allowed || r.Remaining != 5 {
		t.Fatalf("busy bucket after the sweep: %+v, want 5 tokens left", r)
	}
	if r := take(t, s, "idle-7", 10); !r.Allowed {
		t.Fatalf("swept bucket is not full: %+v", r)
	}
}

func TestKeyCapEvictsClosestToFull(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0), memory.WithMaxKeys(1000))
	take(t, s, "tenant", 10) // the real tenant, exhausted first...
	clock.Advance(time.Millisecond)
	take(t, s, "tenant", 1) // ...and still active: its TAT is the latest
	for i := 0; i < 5000; i++ {
		take(t, s, fmt.Sprint("fake-", i), 1)
		clock.Advance(time.Microsecond)
		if i%1000 == 0 {
			take(t, s, "tenant", 1) // denied, but keeps the bucket ahead of the flood
		}
	}
	st := s.Stats()
	if st.Keys > 1000 {
		t.Fatalf("%d keys tracked, cap is 1000", st.Keys)
	}
	if st.Evictions == 0 {
		t.Fatal("no evictions counted for a flood of 5000 keys over a cap of 1000")
	}
	if r := take(t, s, "tenant", 1); r.Allowed {
		t.Fatalf("the exhausted tenant was evicted by the flood of fake keys: %+v", r)
	}
}

func TestFullBucketsGoBeforeEvictions(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0), memory.WithMaxKeys(500))
	// 200 new keys a round: far below the cap of each of the 4 shards
	// (125) however they hash, but ten rounds hold 2,000 in all.
	for round := 0; round < 10; round++ {
		for i := 0; i < 200; i++ {
			take(t, s, fmt.Sprint("r", round, "-", i), 1)
		}
		clock.Advance(time.Second) // every bucket is full again
	}
	if st := s.Stats(); st.Evictions != 0 {
		t.Fatalf("%d evictions although every old bucket was full: %+v", st.Evictions, st)
	}
}

func TestLongKeysHaveBoundedMemory(t *testing.T) {
	s := memory.New(memory.WithSweepInterval(0))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	prefix := strings.Repeat("k", 64<<10)
	for i := 0; i < 200; i++ {
		key := prefix + fmt.Sprint(i)
		if r, err := s.Take(context.Background(), key, limit, 1); err != nil || !r.Allowed {
			t.Fatal(r, err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(s)
	// 200 keys of 64 KiB would be 12.5 MiB if kept whole.
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 1<<20 {
		t.Fatalf("200 long keys grew the heap by %d bytes", grew)
	}
	if s.Stats().Keys != 200 {
		t.Fatalf("%d keys, want 200 distinct buckets", s.Stats().Keys)
	}
}

// TestChurn runs takes on a hot key while other goroutines flood new keys
// past the cap and sweep, and checks the hot key is never over-granted.
func TestChurn(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0), memory.WithMaxKeys(2000))
	hot := tollgate.Limit{Rate: 1000, Burst: 100}
	var allowed atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				runtime.Gosched() // leave room for the goroutine that moves the clock
				if w < 4 {
					if r, _ := s.Take(context.Background(), "hot", hot, 1); r.Allowed {
						allowed.Add(1)
					}
				} else {
					s.Take(context.Background(), fmt.Sprint(w, "-", i), limit, 1)
					if i%500 == 0 {
						s.Sweep()
					}
				}
			}
		}()
	}
	var advanced time.Duration
	for i := 0; i < 200; i++ {
		time.Sleep(100 * time.Microsecond) // let the workers run; the store's time is the clock's
		clock.Advance(time.Millisecond)
		advanced += time.Millisecond
	}
	close(stop)
	wg.Wait()
	ceiling := hot.Burst + int64(hot.Rate*advanced.Seconds())
	if got := allowed.Load(); got > ceiling {
		t.Fatalf("hot key allowed %d, ceiling %d", got, ceiling)
	}
	if st := s.Stats(); st.Keys > 2000 {
		t.Fatalf("%d keys over the cap of 2000", st.Keys)
	}
}

func TestCloseStopsSweeperAndStoreStillWorks(t *testing.T) {
	s := memory.New(memory.WithSweepInterval(time.Millisecond))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s.Close() // twice is fine
	if r := take(t, s, "k", 1); !r.Allowed {
		t.Fatal(r)
	}
}
