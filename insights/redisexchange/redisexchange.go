// Package redisexchange shares the summaries of insights.Trackers through
// Redis, so that every replica of a service reports the same fleet-wide
// upgrade candidates.
//
// Each time bucket is one Redis hash, "<prefix><bucket>", with one field
// per replica process holding that process's summary of the bucket (at
// most k tenants, tens of kilobytes for k = 1,000). A process overwrites
// its own field with HSET and renews the hash's TTL, so Redis holds one
// hash per bucket that a window can show (about 70: 13 five-minute, 25
// hourly and 29 six-hour buckets) and one field per process that counted
// something in that bucket; a process that goes away, or restarts, leaves
// its fields to expire with their bucket. A read is one HGETALL per
// bucket, in one pipeline.
package redisexchange

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/insights"
)

// DefaultPrefix starts every key an Exchange writes, unless WithPrefix says
// otherwise.
const DefaultPrefix = "tollgate:insights:"

// An Exchange is an insights.Exchange on Redis: a single server, a cluster
// or a sentinel set-up, through a go-redis UniversalClient. It is safe for
// concurrent use. The zero Exchange is not usable; call New.
type Exchange struct {
	client redis.UniversalClient
	prefix string
}

var _ insights.Exchange = (*Exchange)(nil)

// An Option configures an Exchange.
type Option func(*Exchange)

// WithPrefix sets the prefix of every key the Exchange writes (default
// DefaultPrefix). Services that share a Redis need prefixes of their own.
func WithPrefix(prefix string) Option {
	return func(x *Exchange) { x.prefix = prefix }
}

// New returns an Exchange on client. It fails on a nil client or an empty
// prefix.
func New(client redis.UniversalClient, opts ...Option) (*Exchange, error) {
	x := &Exchange{client: client, prefix: DefaultPrefix}
	for _, o := range opts {
		if o != nil {
			o(x)
		}
	}
	switch {
	case client == nil:
		return nil, errors.New("redisexchange: New: the client is nil")
	case x.prefix == "":
		return nil, errors.New("redisexchange: New: WithPrefix: the prefix is empty")
	}
	return x, nil
}

// Key returns the Redis key of bucket.
func (x *Exchange) Key(bucket string) string { return x.prefix + bucket }

// Publish writes each summary into its bucket's hash under process and
// sets the hash's TTL, in one pipeline.
func (x *Exchange) Publish(ctx context.Context, process string, summaries []insights.BucketSummary) error {
	if len(summaries) == 0 {
		return nil
	}
	_, err := x.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, s := range summaries {
			key := x.Key(s.Bucket)
			p.HSet(ctx, key, process, s.Data)
			p.PExpire(ctx, key, s.TTL)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redisexchange: publishing %d summaries: %w", len(summaries), err)
	}
	return nil
}

// Collect reads every process's summaries of buckets, in one pipeline.
func (x *Exchange) Collect(ctx context.Context, buckets []string) ([]map[string][]byte, error) {
	if len(buckets) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.MapStringStringCmd, len(buckets))
	_, err := x.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, b := range buckets {
			cmds[i] = p.HGetAll(ctx, x.Key(b))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redisexchange: reading %d buckets: %w", len(buckets), err)
	}
	out := make([]map[string][]byte, len(buckets))
	for i, c := range cmds {
		m := c.Val()
		out[i] = make(map[string][]byte, len(m))
		for process, data := range m {
			out[i][process] = []byte(data)
		}
	}
	return out, nil
}
