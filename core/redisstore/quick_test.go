package redisstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/redisstore"
)

func TestQuick(t *testing.T) {
	client := newClient(t)
	s, _ := redisstore.New(client, redisstore.WithPrefix(testPrefix(t)))
	lim := tollgate.Limit{Rate: 1e5, Burst: 1e6}
	start := time.Now()
	for i := 0; i < 2000; i++ {
		if _, err := s.Take(context.Background(), "k", lim, 1); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("serial: %v per take", time.Since(start)/2000)
	start = time.Now()
	var wg sync.WaitGroup
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				if _, err := s.Take(context.Background(), "k2", lim, 1); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("parallel: %v per take", time.Since(start)/(64*500))
}
