package insights

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultFlushInterval is how often a Tracker with an Exchange publishes its
// summaries, unless WithFlushInterval says otherwise. A replica's
// candidates reach the others within about this long, or sooner when a
// report is read on it.
const DefaultFlushInterval = 10 * time.Second

// fleetReadTimeout bounds how long a report waits for the Exchange: then it
// answers with what the Exchange said last, marked stale, so that the page
// stays up when the Exchange does not answer.
const fleetReadTimeout = time.Second

// maxFleetReads bounds the reads of the Exchange in flight: a read the
// Exchange does not answer keeps its goroutine until the client gives up,
// and reports meanwhile answer stale without starting more.
const maxFleetReads = 4

// collectTimeout bounds a read of the Exchange that no report waits for any
// more; its answer, if it comes, serves the next report.
const collectTimeout = 10 * time.Second

// An Exchange is where the replicas of a service share their summaries, so
// that each can report the candidates of the whole fleet. A Tracker
// publishes, per process and time bucket, one summary of at most k
// tenants, replacing the process's previous one of that bucket; the store
// must keep each for at least its TTL and may then drop it. So the store
// holds at most one summary per process and bucket, and a few dozen
// buckets.
//
// A Tracker treats summaries as opaque bytes and checks what it reads: an
// Exchange holds no logic of its own. The redisexchange package implements
// one on Redis. Implementations must be safe for concurrent use, and
// should honour ctx, though a Tracker does not rely on it.
type Exchange interface {
	// Publish stores each summary as the version of its bucket that the
	// process named process counted.
	Publish(ctx context.Context, process string, summaries []BucketSummary) error
	// Collect returns, for each of buckets, the summaries that processes
	// published for it, by process.
	Collect(ctx context.Context, buckets []string) ([]map[string][]byte, error)
}

// A BucketSummary is one process's summary of one time bucket, as a
// Tracker publishes it.
type BucketSummary struct {
	Bucket string        // names the bucket: its width and start, such as "3600s:1764633600"
	Data   []byte        // the summary, encoded
	TTL    time.Duration // how long the bucket can still be read
}

// WithExchange makes the Tracker publish its summaries to x as replica,
// every flush interval and when a report is read, and report the
// candidates of every replica that publishes there. replica must be unique
// among the replicas that run at once; "" picks the host name and a random
// suffix. A replica restarted under the same name adds to what it
// published before: each process publishes under the name and an
// incarnation of its own. The Tracker publishes in the background until
// Close.
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
	t.process = t.replica + incarnationMark + randomHex(incarnationBytes)
	t.fleet.final = map[string]fleetBucket{}
	t.fleet.recent = map[string]map[string]*frozen{}
	t.fleet.reads = make(chan struct{}, maxFleetReads)
	t.stop, t.stopped = make(chan struct{}), make(chan struct{})
	go t.publishLoop()
	return nil
}

// A process publishes as its replica's name, incarnationMark and
// 2*incarnationBytes hex digits of its own.
const (
	incarnationMark  = "#"
	incarnationBytes = 6
)

// replicaName returns the replica's name in a process's field of the
// exchange.
func replicaName(process string) string {
	n := len(process) - 2*incarnationBytes - len(incarnationMark)
	if n < 0 || process[n:n+len(incarnationMark)] != incarnationMark {
		return process // a field of an earlier version: the name alone
	}
	if _, err := hex.DecodeString(process[n+len(incarnationMark):]); err != nil {
		return process
	}
	return process[:n]
}

func defaultReplica() string {
	host, _ := os.Hostname()
	if len(host) > 64 {
		host = host[:64]
	}
	return host + "-" + randomHex(6)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
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
// after publishing one last time, within 5 seconds, so that the fleet keeps
// this replica's latest counts. It returns that publication's error, or an
// error if called again. Without an Exchange it does nothing.
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
		// No publication starts from now on; one that a report started
		// meanwhile ends before Close returns.
		t.pubMu.Lock()
		t.closed = true
		p := t.pub
		t.pubMu.Unlock()
		if p != nil {
			select {
			case <-p.done:
			case <-ctx.Done():
			}
		}
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
// every tier: for each, this process's whole count of the bucket. A
// Tracker publishes every flush interval in the background and at each
// fleet-wide read; call Flush only to publish sooner. It returns when ctx is
// done even if the Exchange has not answered; the publication goes on,
// bounded by the flush interval, and the next one waits for it. Without an
// Exchange it does nothing.
func (t *Tracker) Flush(ctx context.Context) error {
	if t.exchange == nil {
		return nil
	}
	for {
		p, joined := t.publish()
		select {
		case <-p.done:
		case <-ctx.Done():
			return fmt.Errorf("insights: publishing to the exchange: %w", ctx.Err())
		}
		if !joined {
			return p.err
		}
		// That publication began before this call: publish what came since.
	}
}

// A publication is one Publish to the Exchange, on a goroutine of its own;
// done is closed when it ends, err set.
type publication struct {
	done chan struct{}
	err  error
}

// publish starts publishing what changed, or returns the publication in
// progress (joined), so that at most one Publish is in flight and none
// overtakes an older one.
func (t *Tracker) publish() (p *publication, joined bool) {
	t.pubMu.Lock()
	defer t.pubMu.Unlock()
	if t.pub != nil {
		return t.pub, true
	}
	p = &publication{done: make(chan struct{})}
	if t.closed {
		p.err = errClosed
		close(p.done)
		return p, false
	}
	t.pub = p
	go func() {
		p.err = t.publishChanges()
		t.pubMu.Lock()
		t.pub = nil
		t.pubMu.Unlock()
		close(p.done)
	}()
	return p, false
}

// publishChanges publishes the buckets touched since the last publication.
func (t *Tracker) publishChanges() error {
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
	ctx, cancel := context.WithTimeout(context.Background(), t.flushEvery)
	defer cancel()
	err := t.exchange.Publish(ctx, t.process, out)
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

// A fleetCache keeps what the Exchange said: the fleet-wide merges of
// buckets that no replica changes any more, so that a read fetches only the
// recent ones, and the other processes' summaries of the recent ones as
// last read, for reports that the Exchange does not answer in time. It
// holds at most the buckets that the windows show.
type fleetCache struct {
	mu       sync.Mutex
	final    map[string]fleetBucket
	recent   map[string]map[string]*frozen // bucket -> process -> summary; this process's left out
	lastRead [len(tiers)]time.Time         // when the Exchange last answered a read of the tier
	reads    chan struct{}                 // a token per read in flight
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

// A fleetRead is the fleet-wide buckets of one window.
type fleetRead struct {
	slots    []*frozen // nil: the Exchange never answered; report local's
	replicas []string
	stale    bool      // the Exchange did not answer this read in time
	asOf     time.Time // with stale, when it last answered
	err      error     // why the read is stale or missing
}

// fleetSlots returns the fleet-wide buckets of tier i for the slots from
// first to last: this process's own, local, merged with what the other
// processes published. It publishes this process's latest counts and reads
// the other processes' at once, and waits for the Exchange at most
// fleetReadTimeout.
func (t *Tracker) fleetSlots(ctx context.Context, i int, first, last int64, now time.Time, local []*frozen) fleetRead {
	ctx, cancel := context.WithTimeout(ctx, fleetReadTimeout)
	defer cancel()
	pub, _ := t.publish()

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

	var read fleetRead
	if len(names) > 0 {
		read.err = t.collect(ctx, i, names, now)
	}
	t.fleet.mu.Lock()
	if read.err != nil {
		read.asOf = t.fleet.lastRead[i]
		if read.asOf.IsZero() {
			t.fleet.mu.Unlock()
			return read // nothing to show but this replica's own
		}
		read.stale = true
	}
	recent := make([]map[string]*frozen, len(names))
	for m, name := range names {
		recent[m] = t.fleet.recent[name]
	}
	t.fleet.mu.Unlock()

	for m, j := range at {
		buckets[j] = t.mergeFleet(recent[m], local[j], first+int64(j)*w, w)
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
		if end := first + int64(j+1)*w; !read.stale && time.Unix(end, 0).Add(t.finalAfter()).Before(now) && buckets[j].f != nil {
			t.fleet.final[names[m]] = buckets[j]
		}
	}
	t.fleet.mu.Unlock()

	read.slots = make([]*frozen, n)
	seen := map[string]bool{}
	for j, b := range buckets {
		read.slots[j] = b.f
		for _, id := range b.replicas {
			if !seen[id] {
				seen[id] = true
				read.replicas = append(read.replicas, id)
			}
		}
	}
	slices.Sort(read.replicas)
	// This process's counts are in the report already; its publication,
	// for the other replicas, gets what is left of the wait.
	select {
	case <-pub.done:
	case <-ctx.Done():
	}
	return read
}

// errReadsBusy says why a report did not read the Exchange.
var errReadsBusy = errors.New("insights: reading the exchange: earlier reads are still waiting for it")

// collect reads the other processes' summaries of tier i's buckets names
// into t.fleet.recent, waiting until ctx is done at most. The read itself
// goes on until it ends or collectTimeout passes, and fills the cache for
// the next report.
func (t *Tracker) collect(ctx context.Context, i int, names []string, now time.Time) error {
	select {
	case t.fleet.reads <- struct{}{}:
	default:
		return errReadsBusy
	}
	done := make(chan error, 1)
	go func() {
		defer func() { <-t.fleet.reads }()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), collectTimeout)
		defer cancel()
		got, err := t.exchange.Collect(rctx, names)
		switch {
		case err != nil:
			err = fmt.Errorf("insights: reading the exchange: %w", err)
		case len(got) != len(names):
			err = fmt.Errorf("insights: the exchange answered %d buckets for %d", len(got), len(names))
		default:
			t.keep(i, names, got, now)
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("insights: reading the exchange: no answer within %v", fleetReadTimeout)
	}
}

// keep decodes what the Exchange answered for names, at now, into
// t.fleet.recent: each process's summary of each bucket, but this
// process's own, which its counts in memory supersede. A summary that does
// not decode, or that describes another bucket, is left out: a replica
// running another version must not break the page of the others.
func (t *Tracker) keep(i int, names []string, got []map[string][]byte, now time.Time) {
	w := tiers[i].width
	decoded := make([]map[string]*frozen, len(names))
	for m, byProcess := range got {
		slot, _ := strconv.ParseInt(names[m][strings.IndexByte(names[m], ':')+1:], 10, 64)
		decoded[m] = make(map[string]*frozen, len(byProcess))
		for process, data := range byProcess {
			if process == t.process {
				continue
			}
			if f, err := decode(data, t.k); err == nil && f.start == slot && f.width == w {
				decoded[m][process] = f
			}
		}
	}
	t.fleet.mu.Lock()
	defer t.fleet.mu.Unlock()
	if now.Before(t.fleet.lastRead[i]) {
		return // a later read answered first
	}
	t.fleet.lastRead[i] = now
	for m, name := range names {
		t.fleet.recent[name] = decoded[m]
	}
	for name := range t.fleet.recent {
		width, start := bucketBounds(name)
		if start < oldestShown(width, now) {
			delete(t.fleet.recent, name)
		}
	}
}

// bucketBounds reads the width and start of a bucket from its name.
func bucketBounds(name string) (width, start int64) {
	w, s, _ := strings.Cut(name, "s:")
	width, _ = strconv.ParseInt(w, 10, 64)
	start, _ = strconv.ParseInt(s, 10, 64)
	return width, start
}

// mergeFleet merges one bucket, of width w starting at slot, over the
// processes that counted in it: the others' summaries and this process's
// own. The processes of one replica name (a replica restarted under it)
// follow each other in time, so their counts add up and their peaks do
// not; different replicas share the traffic, so their peaks add up too.
// Processes and names are taken in order, so that every replica merges
// alike.
func (t *Tracker) mergeFleet(others map[string]*frozen, own *frozen, slot, w int64) fleetBucket {
	parts := make(map[string]*frozen, len(others)+1)
	for p, f := range others {
		parts[p] = f
	}
	if own != nil {
		parts[t.process] = own
	}
	processes := make([]string, 0, len(parts))
	for p := range parts {
		processes = append(processes, p)
	}
	slices.Sort(processes)
	var names []string
	byName := map[string][]*frozen{}
	for _, p := range processes {
		name := replicaName(p)
		if byName[name] == nil {
			names = append(names, name)
		}
		byName[name] = append(byName[name], parts[p])
	}
	if len(names) == 0 {
		return fleetBucket{}
	}
	slices.Sort(names)
	replicas := make([]*frozen, len(names))
	for n, name := range names {
		replicas[n] = merge(byName[name], t.k, slot, w, overTime)
	}
	return fleetBucket{f: merge(replicas, t.k, slot, w, acrossReplicas), replicas: names}
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
