package insights

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"
)

// DefaultFlushInterval is how often a Tracker with an Exchange publishes its
// summaries, unless WithFlushInterval says otherwise. A replica's
// candidates reach the others within about this long.
const DefaultFlushInterval = 10 * time.Second

// An Exchange is where the replicas of a service share their summaries, so
// that each can report the candidates of the whole fleet. A Tracker
// publishes, per replica and time bucket, one summary of at most k tenants,
// replacing the replica's previous one of that bucket; the store must keep
// each for at least its TTL and may then drop it. So the store holds at most
// one summary per replica and bucket, and a few dozen buckets.
//
// A Tracker treats summaries as opaque bytes and checks what it reads: an
// Exchange holds no logic of its own. The redisexchange package implements
// one on Redis. Implementations must be safe for concurrent use.
type Exchange interface {
	// Publish stores each summary as replica's version of its bucket.
	Publish(ctx context.Context, replica string, summaries []BucketSummary) error
	// Collect returns, for each of buckets, the summaries that replicas
	// published for it, by replica.
	Collect(ctx context.Context, buckets []string) ([]map[string][]byte, error)
}

// A BucketSummary is one replica's summary of one time bucket, as a Tracker
// publishes it.
type BucketSummary struct {
	Bucket string        // names the bucket: its width and start, such as "3600s:1764633600"
	Data   []byte        // the summary, encoded
	TTL    time.Duration // how long the bucket can still be read
}

// WithExchange makes the Tracker publish its summaries to x as replica,
// every flush interval, and report the candidates of every replica that
// publishes there. replica must be unique among the replicas and stable
// over a process's life; "" picks the host name and a random suffix. The
// Tracker publishes in the background until Close.
func WithExchange(x Exchange, replica string) Option {
	return func(t *Tracker) { t.exchange, t.replica = x, replica }
}

// WithFlushInterval sets how often a Tracker with an Exchange publishes
// (default DefaultFlushInterval).
func WithFlushInterval(d time.Duration) Option {
	return func(t *Tracker) { t.flushEvery = d }
}

// maxReplicaID bounds a replica's name, which every summary of the replica
// carries in the exchange.
const maxReplicaID = 128

func (t *Tracker) startExchange() error {
	if t.exchange == nil {
		return nil
	}
	if isNil(t.exchange) {
		return fmt.Errorf("insights: New: WithExchange: the exchange is nil")
	}
	if t.flushEvery <= 0 {
		return fmt.Errorf("insights: New: WithFlushInterval must be > 0, got %v", t.flushEvery)
	}
	if t.replica == "" {
		t.replica = defaultReplica()
	}
	if len(t.replica) > maxReplicaID {
		return fmt.Errorf("insights: New: WithExchange: the replica name must be at most %d bytes, got %d", maxReplicaID, len(t.replica))
	}
	t.fleet.final = map[string]fleetBucket{}
	t.stop, t.stopped = make(chan struct{}), make(chan struct{})
	go t.publishLoop()
	return nil
}

func defaultReplica() string {
	host, _ := os.Hostname()
	if len(host) > 64 {
		host = host[:64]
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}

func (t *Tracker) publishLoop() {
	defer close(t.stopped)
	tick := time.NewTicker(t.flushEvery)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
			ctx, cancel := context.WithTimeout(context.Background(), t.flushEvery)
			_ = t.Flush(ctx) // a failure is retried next time, and a read reports it
			cancel()
		}
	}
}

// Close stops the background publication of a Tracker with an Exchange,
// after publishing one last time so that the fleet keeps this replica's
// latest counts. It returns that publication's error, or an error if called
// again. Without an Exchange it does nothing.
func (t *Tracker) Close() error {
	if t.exchange == nil {
		return nil
	}
	err := errClosed
	t.closeOnce.Do(func() {
		close(t.stop)
		<-t.stopped
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = t.Flush(ctx)
	})
	return err
}

// bucketName names the tier-i bucket that starts at slot in the exchange.
func bucketName(i int, slot int64) string {
	return strconv.FormatInt(tiers[i].width, 10) + "s:" + strconv.FormatInt(slot, 10)
}

// bucketTTL is how long a tier-i bucket can still be read, with a margin
// for replicas whose clocks differ.
func bucketTTL(i int) time.Duration {
	return time.Duration(int64(tiers[i].keep+2)*tiers[i].width) * time.Second
}

// Flush publishes the buckets that changed since the last publication, in
// every tier: for each, this replica's whole count of the bucket. It is
// called every flush interval in the background and before each fleet-wide
// read, so that a replica's reports include its own latest counts; call it
// directly only to publish sooner. Without an Exchange it does nothing.
func (t *Tracker) Flush(ctx context.Context) error {
	if t.exchange == nil {
		return nil
	}
	t.flushMu.Lock()
	defer t.flushMu.Unlock()

	type slotKey struct {
		tier int
		slot int64
	}
	t.mu.Lock()
	touched := t.touched
	t.touched = nil
	if t.openDirty {
		touched = append(touched, t.openStart)
		t.openDirty = false
	}
	t.mu.Unlock()
	if len(touched) == 0 {
		return nil
	}
	var keys []slotKey
	var parts [][]*frozen
	loose := t.lockTiers()
	for _, s := range touched {
		for i := range tiers {
			k := slotKey{i, floorTo(s, tiers[i].width)}
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
				parts = append(parts, t.slotParts(i, k.slot, loose, nil))
			}
		}
	}
	t.tiersMu.Unlock()

	out := make([]BucketSummary, 0, len(keys))
	for n, k := range keys {
		b := t.composite(k.tier, k.slot, parts[n])
		if b == nil {
			continue
		}
		out = append(out, BucketSummary{Bucket: bucketName(k.tier, k.slot), Data: encode(b), TTL: bucketTTL(k.tier)})
	}
	err := t.exchange.Publish(ctx, t.replica, out)
	if err != nil {
		// Publish again next time: the counts are still here.
		t.mu.Lock()
		t.touched = append(t.touched, touched...)
		t.trimTouched()
		t.mu.Unlock()
		err = fmt.Errorf("insights: publishing to the exchange: %w", err)
	}
	return err
}

// A fleetCache keeps the fleet-wide merges of buckets that no replica
// changes any more, so a read fetches only the recent ones. It holds at
// most the buckets that the windows show.
type fleetCache struct {
	mu    sync.Mutex
	final map[string]fleetBucket
}

// A fleetBucket is one bucket merged over the replicas that published it.
type fleetBucket struct {
	f        *frozen // nil if no replica counted anything in it
	replicas []string
}

// finalAfter is how long after its end a bucket may still change: every
// replica publishes its last version of it within a flush interval, or
// two if one publication failed.
func (t *Tracker) finalAfter() time.Duration {
	return 2*t.flushEvery + 30*time.Second
}

// fleetSlots returns the fleet-wide buckets of tier i for the slots from
// first to last, and the replicas that published any of them.
func (t *Tracker) fleetSlots(ctx context.Context, i int, first, last int64, now time.Time) ([]*frozen, []string, error) {
	if err := t.Flush(ctx); err != nil {
		return nil, nil, err
	}
	w := tiers[i].width
	n := int((last-first)/w + 1)
	buckets := make([]fleetBucket, n)
	var names []string
	var at []int
	t.fleet.mu.Lock()
	for j := range n {
		name := bucketName(i, first+int64(j)*w)
		if b, ok := t.fleet.final[name]; ok {
			buckets[j] = b
			continue
		}
		names = append(names, name)
		at = append(at, j)
	}
	t.fleet.mu.Unlock()

	if len(names) > 0 {
		got, err := t.exchange.Collect(ctx, names)
		if err != nil {
			return nil, nil, fmt.Errorf("insights: reading the exchange: %w", err)
		}
		if len(got) != len(names) {
			return nil, nil, fmt.Errorf("insights: the exchange answered %d buckets for %d", len(got), len(names))
		}
		for m, byReplica := range got {
			j := at[m]
			buckets[j] = t.mergeReplicas(byReplica, first+int64(j)*w, w)
		}
	}

	// Remember the buckets that no replica will change any more, and
	// forget those that no window shows.
	t.fleet.mu.Lock()
	for name, b := range t.fleet.final {
		if b.f != nil && b.f.start < oldestShown(b.f.width, now) {
			delete(t.fleet.final, name)
		}
	}
	for m, j := range at {
		if end := first + int64(j+1)*w; time.Unix(end, 0).Add(t.finalAfter()).Before(now) && buckets[j].f != nil {
			t.fleet.final[names[m]] = buckets[j]
		}
	}
	t.fleet.mu.Unlock()

	out := make([]*frozen, n)
	seen := map[string]bool{}
	var replicas []string
	for j, b := range buckets {
		out[j] = b.f
		for _, id := range b.replicas {
			if !seen[id] {
				seen[id] = true
				replicas = append(replicas, id)
			}
		}
	}
	slices.Sort(replicas)
	return out, replicas, nil
}

// mergeReplicas merges the summaries that replicas published for the bucket
// of width w starting at slot. A summary that does not decode, or that
// describes another bucket, is left out: a replica running another version
// must not break the page of the others.
func (t *Tracker) mergeReplicas(byReplica map[string][]byte, slot, w int64) fleetBucket {
	ids := make([]string, 0, len(byReplica))
	for id := range byReplica {
		ids = append(ids, id)
	}
	slices.Sort(ids) // the same merge, in the same order, on every replica
	parts := make([]*frozen, 0, len(ids))
	kept := ids[:0]
	for _, id := range ids {
		f, err := decode(byReplica[id], t.k)
		if err != nil || f.start != slot || f.width != w {
			continue
		}
		parts = append(parts, f)
		kept = append(kept, id)
	}
	if len(parts) == 0 {
		return fleetBucket{}
	}
	return fleetBucket{f: merge(parts, t.k, slot, w, acrossReplicas), replicas: kept}
}

// oldestShown returns the start of the oldest bucket of width w that a
// window shows at now.
func oldestShown(w int64, now time.Time) int64 {
	for _, tr := range tiers {
		if tr.width == w {
			return floorTo(now.Unix(), w) - int64(tr.keep)*w
		}
	}
	return now.Unix()
}
