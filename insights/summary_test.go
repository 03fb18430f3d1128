package insights

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// feed counts a throttled request of tenant, weighing cost, into s, as
// Tracker.Observe does.
func feed(s *summary, tenant string, cost, now int64) {
	e := s.lookup(tenant)
	if e == nil {
		e = s.admit(tenant, now)
	}
	e.last = now
	e.requests++
	e.throttled++
	e.throttledTokens += cost
	s.total += cost
	s.addWeight(e, cost)
}

// checkHeap fails unless s's heap is a min-heap whose positions match.
func checkHeap(t *testing.T, s *summary) {
	t.Helper()
	if len(s.heap) != len(s.entries) || len(s.index) != len(s.entries) {
		t.Fatalf("heap %d, entries %d, index %d", len(s.heap), len(s.entries), len(s.index))
	}
	for p, i := range s.heap {
		if int(s.entries[i].heapAt) != p {
			t.Fatalf("entry %d says heap position %d, is at %d", i, s.entries[i].heapAt, p)
		}
		if c := 2*p + 1; c < len(s.heap) && s.entries[s.heap[c]].weight < s.entries[i].weight {
			t.Fatalf("heap order broken at %d", p)
		}
	}
}

func TestSpaceSavingKeepsHeavyTenantsAmongNoise(t *testing.T) {
	const k = 50
	s := newSummary(k, 0)
	truth := map[string]int64{}
	rng := rand.New(rand.NewPCG(1, 2))
	heavy := []string{"alpha", "bravo", "charlie"}
	for i := range 200_000 {
		tenant := fmt.Sprintf("noise-%d", rng.IntN(100_000))
		cost := int64(1 + rng.IntN(3))
		if i%10 == 0 {
			tenant, cost = heavy[i%3], 2
		}
		truth[tenant] += cost
		feed(s, tenant, cost, int64(i))
	}
	checkHeap(t, s)
	if len(s.entries) != k {
		t.Fatalf("%d entries, want k = %d", len(s.entries), k)
	}
	for _, h := range heavy {
		e := s.lookup(h)
		if e == nil {
			t.Fatalf("heavy tenant %s not tracked", h)
		}
		if e.weight < truth[h] || e.weight-e.overcount > truth[h] {
			t.Fatalf("%s: weight %d, overcount %d, true %d: the bounds do not hold", h, e.weight, e.overcount, truth[h])
		}
	}
	// Every tracked tenant's weight is an upper bound and weight-overcount
	// a lower bound of its throttled tokens.
	for i := range s.entries {
		e := &s.entries[i]
		if e.weight < truth[e.tenant] || e.weight-e.overcount > truth[e.tenant] {
			t.Fatalf("%s: weight %d, overcount %d, true %d", e.tenant, e.weight, e.overcount, truth[e.tenant])
		}
	}
}

func TestMergeKeepsTheBounds(t *testing.T) {
	const k = 20
	truth := map[string]int64{}
	var parts []*frozen
	rng := rand.New(rand.NewPCG(3, 4))
	for p := range 6 {
		s := newSummary(k, 0)
		for i := range 5000 {
			tenant := fmt.Sprintf("t%d", rng.IntN(300))
			if i%4 == 0 {
				tenant = fmt.Sprintf("hot%d", p%2)
			}
			truth[tenant]++
			feed(s, tenant, 1, int64(i))
		}
		parts = append(parts, s.freeze(int64(p)*300, 300))
	}
	for _, mode := range []mergeMode{overTime, acrossReplicas} {
		m := merge(parts, k, 0, 1800, mode)
		if len(m.records) != k {
			t.Fatalf("%d records, want %d", len(m.records), k)
		}
		if m.records[0].tenant != "hot0" && m.records[0].tenant != "hot1" {
			t.Fatalf("heaviest is %s, want a hot tenant", m.records[0].tenant)
		}
		for _, r := range m.records {
			if r.weight < truth[r.tenant] || r.weight-r.overcount > truth[r.tenant] {
				t.Fatalf("%s: weight %d, overcount %d, true %d", r.tenant, r.weight, r.overcount, truth[r.tenant])
			}
		}
		for i := 1; i < len(m.records); i++ {
			if m.records[i].weight > m.records[i-1].weight {
				t.Fatal("records not by weight")
			}
		}
		// A tenant left out weighed at most the floor.
		kept := map[string]bool{}
		for _, r := range m.records {
			kept[r.tenant] = true
		}
		for tenant, n := range truth {
			if !kept[tenant] && n > m.floor {
				t.Fatalf("%s (%d tokens) left out, floor %d", tenant, n, m.floor)
			}
		}
	}
}

func TestMergePeaksAddAcrossReplicasOnly(t *testing.T) {
	a := &frozen{start: 0, width: 300, records: []record{{tenant: "x", plan: "free", tally: tally{weight: 5, peakSecond: 30, peakMinute: 100, first: 10, last: 20}}}}
	b := &frozen{start: 0, width: 300, records: []record{{tenant: "x", plan: "growth", tally: tally{weight: 7, peakSecond: 40, peakMinute: 90, first: 5, last: 30}}}}
	time := merge([]*frozen{a, b}, 10, 0, 300, overTime).records[0]
	fleet := merge([]*frozen{a, b}, 10, 0, 300, acrossReplicas).records[0]
	if time.peakSecond != 40 || time.peakMinute != 100 {
		t.Fatalf("over time: peaks %d, %d; want the larger, 40 and 100", time.peakSecond, time.peakMinute)
	}
	if fleet.peakSecond != 70 || fleet.peakMinute != 190 {
		t.Fatalf("across replicas: peaks %d, %d; want the sums, 70 and 190", fleet.peakSecond, fleet.peakMinute)
	}
	if fleet.weight != 12 || fleet.first != 5 || fleet.last != 30 || fleet.plan != "growth" {
		t.Fatalf("merged %+v", fleet)
	}
}

func TestRoutesAreBounded(t *testing.T) {
	var e entry
	for i := range 100 {
		e.addRoute("GET", fmt.Sprintf("/r%d", i))
	}
	for range 50 {
		e.addRoute("POST", "/api/reports")
	}
	if e.nroutes != maxRoutes {
		t.Fatalf("%d routes, want %d", e.nroutes, maxRoutes)
	}
	found := false
	for _, r := range e.routes[:e.nroutes] {
		found = found || r.route == "/api/reports" && r.throttled >= 50
	}
	if !found {
		t.Fatalf("the busiest route is lost: %+v", e.routes)
	}
	m := mergeRoutes(e.routes[:e.nroutes], []route{{method: "GET", route: "/x", throttled: 1000}})
	if len(m) != maxRoutes || m[0].route != "/x" {
		t.Fatalf("merged routes %+v", m)
	}
}

func sampleFrozen() *frozen {
	return &frozen{start: 1764633600, width: 3600, floor: 3, total: 99, records: []record{
		{tenant: "loopy", plan: "free", tally: tally{weight: 50, overcount: 3, throttled: 40, throttledTokens: 47, shadow: 2, inFlight: 6, near: 9,
			requests: 70, peakSecond: 60, peakMinute: 75, first: 1764633600e9 + 5, last: 1764633700e9, fit: 2},
			routes: []route{{method: "GET", route: "/api/hello", throttled: 30}, {method: "POST", route: "/api/reports", throttled: 10}}},
		{tenant: "<b>ünïcode</b>", plan: "", tally: tally{weight: 4, throttled: 4, throttledTokens: 4, requests: 4, first: -1, last: 1, fit: -1}},
	}}
}

func TestCodecRoundTrip(t *testing.T) {
	f := sampleFrozen()
	got, err := decode(encode(f), 100)
	if err != nil {
		t.Fatal(err)
	}
	got.records[1].routes = nil // decode leaves no routes as nil too; normalise
	f.records[1].routes = nil
	if !reflect.DeepEqual(got, f) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, f)
	}
	// A reader with a smaller k keeps the heaviest and raises the floor.
	small, err := decode(encode(f), 1)
	if err != nil || len(small.records) != 1 || small.records[0].tenant != "loopy" || small.floor != 4 {
		t.Fatalf("k = 1: %+v, %v", small, err)
	}
}

// encodeV1 encodes f as the version before did: without inFlight.
func encodeV1(f *frozen) []byte {
	b := []byte(codecMagicV1)
	b = binary.AppendUvarint(b, uint64(f.width))
	b = binary.AppendVarint(b, f.start)
	b = binary.AppendUvarint(b, uint64(f.floor))
	b = binary.AppendUvarint(b, uint64(f.total))
	b = binary.AppendUvarint(b, uint64(len(f.records)))
	for i := range f.records {
		r := &f.records[i]
		b = appendString(b, r.tenant)
		b = appendString(b, r.plan)
		counts := r.counts()
		for _, v := range counts[:countsV1] {
			b = binary.AppendUvarint(b, uint64(*v))
		}
		b = binary.AppendVarint(b, r.first)
		b = binary.AppendVarint(b, r.last)
		b = binary.AppendVarint(b, r.fit)
		b = binary.AppendUvarint(b, uint64(len(r.routes)))
		for _, rt := range r.routes {
			b = appendString(b, rt.method)
			b = appendString(b, rt.route)
			b = binary.AppendUvarint(b, uint64(rt.throttled))
		}
	}
	return b
}

// TestDecodeReadsTheVersionBefore: while a fleet is upgraded, the
// summaries of replicas of the version before are read, with no in-flight
// refusals.
func TestDecodeReadsTheVersionBefore(t *testing.T) {
	f := sampleFrozen()
	got, err := decode(encodeV1(f), 100)
	if err != nil {
		t.Fatal(err)
	}
	f.records[0].inFlight = 0
	got.records[1].routes, f.records[1].routes = nil, nil
	if !reflect.DeepEqual(got, f) {
		t.Fatalf("version 1:\n got %+v\nwant %+v", got, f)
	}
}

func TestDecodeRejectsDamage(t *testing.T) {
	good := encode(sampleFrozen())
	for name, b := range map[string][]byte{
		"empty":       nil,
		"other magic": append([]byte("TGI9"), good[4:]...),
		"truncated":   good[:len(good)-3],
		"trailing":    append(bytes.Clone(good), 0),
		"huge count":  append([]byte("TGI1\x01\x00\x00\x00"), 0xff, 0xff, 0xff, 0xff, 0x0f),
		"zero width":  []byte("TGI1\x00\x00\x00\x00\x00"),
		// A route count in the billions: found by FuzzDecode, once read
		// as the number of routes to append.
		"huge route count": []byte("TGI1\x90\x1c\xb0\r\x03c\x02\x05loopy\x04free2\x03(/orts\n\x80\xc0뜺\x9e\xfd0\x80\xa0\xf7\xf2\x85\xc0\x9e\xfd0\x1c\x80\xb0\xf1\x92/"),
	} {
		if _, err := decode(b, 100); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	dup := sampleFrozen()
	dup.records[1].tenant = dup.records[0].tenant
	if _, err := decode(encode(dup), 100); err == nil {
		t.Error("a repeated tenant decoded")
	}
}

// FuzzDecode: hostile bytes in the exchange never panic the reader, and
// whatever decodes encodes back to a summary that decodes the same.
func FuzzDecode(f *testing.F) {
	f.Add(encode(sampleFrozen()))
	f.Add([]byte("TGI1"))
	f.Add(encodeV1(sampleFrozen()))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decode(b, 50)
		if err != nil {
			return
		}
		again, err := decode(encode(got), 50)
		if err != nil || len(again.records) != len(got.records) {
			t.Fatalf("re-encoded summary: %v", err)
		}
		_ = merge([]*frozen{got, again}, 50, got.start, got.width, acrossReplicas)
	})
}

func TestPeaksHeldByAPlan(t *testing.T) {
	plans := tollgate.DefaultPlans() // free 20@2, startup 100@10, growth 500@50, enterprise 2000@200
	tr := &Tracker{plans: plans}
	for _, c := range []struct {
		second, minute, fit int64
		want                int
	}{
		{0, 0, -1, 0},
		{22, 140, -1, 0},
		{23, 23, -1, 1},
		{20, 141, -1, 1},
		{550, 550, -1, 2},
		{100, 3500, -1, 2},
		{100, 3501, -1, 3},
		{2200, 14000, -1, 3},
		{2201, 0, -1, 4},
		{0, 0, 2, 2},   // the replay needs growth
		{550, 0, 1, 2}, // the peaks need more than the replay
		{0, 0, 4, 4},   // no plan passed the replay
	} {
		r := &record{tally: tally{peakSecond: c.second, peakMinute: c.minute, fit: c.fit}}
		if got := tr.suggest(r); got != c.want {
			t.Errorf("peaks %d/s, %d/min, fit %d: plan %d; want %d", c.second, c.minute, c.fit, got, c.want)
		}
	}
}
