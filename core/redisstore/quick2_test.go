package redisstore_test

import (
	"context"
	"testing"
	"time"
)

func TestQuickPing(t *testing.T) {
	client := newClient(t)
	ctx := context.Background()
	start := time.Now()
	for i := 0; i < 2000; i++ {
		client.Ping(ctx)
	}
	t.Logf("ping: %v", time.Since(start)/2000)
	start = time.Now()
	for i := 0; i < 2000; i++ {
		go func() {}()
	}
	ch := make(chan struct{})
	start = time.Now()
	for i := 0; i < 2000; i++ {
		go func() { client.Ping(ctx); ch <- struct{}{} }()
		<-ch
	}
	t.Logf("ping via goroutine: %v", time.Since(start)/2000)
}
