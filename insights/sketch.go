package insights

import (
	"hash/maphash"
	"math"
)

// The size of a sketch: 4 rows of 4,096 cells. With conservative update, a
// count is over-stated by at most about e/4096 (0.07 %) of what the sketch
// counted in all, with probability 1-e^-4 (98 %): little beside the count of
// a tenant that hits its limit.
const (
	sketchDepth = 4
	sketchWidth = 4096
)

// A sketch is a count-min sketch (Cormode and Muthukrishnan, 2005) with
// conservative update. It counts, in fixed memory (384 KiB), what the open
// bucket's summary cannot count for the tenants it does not track yet:
// their requests, their near-limit requests, and their tokens in the current
// clock second and minute. So a tenant that enters the summary on its first
// throttled request starts with what it did before: its throttled share is
// a share of all its requests, and its peaks include the burst that emptied
// its bucket. A count is never under-stated.
//
// A cell holds the four counts of the tenants that hash to it, so that
// counting a request reads one cache line per row. The second and minute
// counts carry the number of their window in their upper half; a count of
// an earlier window reads as 0, so they never need clearing.
//
// A sketch is not safe for concurrent use; the Tracker locks around it.
type sketch struct {
	seed maphash.Seed
	rows [sketchDepth][sketchWidth]sketchCell
}

type sketchCell struct {
	requests, near uint32
	second, minute uint64 // window<<32 | tokens
}

func newSketch() *sketch { return &sketch{seed: maphash.MakeSeed()} }

// reset forgets every count.
func (s *sketch) reset() { s.rows = [sketchDepth][sketchWidth]sketchCell{} }

// cells locates a tenant's cell in each row.
type cells [sketchDepth]*sketchCell

// locate hashes tenant once and derives its cell in each row by double
// hashing.
func (s *sketch) locate(tenant string) cells {
	h := maphash.String(s.seed, tenant)
	h1, h2 := uint32(h), uint32(h>>32)|1
	var c cells
	for i := range c {
		c[i] = &s.rows[i][(h1+uint32(i)*h2)&(sketchWidth-1)]
	}
	return c
}

// A sketchCount is what a sketch holds of a tenant.
type sketchCount struct {
	requests, near, secondTokens, minuteTokens int64
}

// add counts a request of cost tokens at the clock second sec and minute
// min, near the limit or not, and returns the tenant's counts before it.
func (s *sketch) add(c cells, sec, minute uint32, cost int64, near bool) sketchCount {
	before := s.count(c, sec, minute)
	n := 0
	if near {
		n = 1
	}
	requests := sat32(before.requests + 1)
	nearCount := sat32(before.near + int64(n))
	second := uint64(sec)<<32 | uint64(sat32(before.secondTokens+cost))
	minuteTokens := uint64(minute)<<32 | uint64(sat32(before.minuteTokens+cost))
	for _, p := range c {
		// Conservative update: raise only the counts below the new least.
		p.requests = max(p.requests, requests)
		p.near = max(p.near, nearCount)
		if uint32(p.second>>32) != sec || p.second < second {
			p.second = second
		}
		if uint32(p.minute>>32) != minute || p.minute < minuteTokens {
			p.minute = minuteTokens
		}
	}
	return before
}

// count returns the tenant's counts: the least of its cells' in each.
func (s *sketch) count(c cells, sec, minute uint32) sketchCount {
	out := sketchCount{requests: math.MaxUint32, near: math.MaxUint32, secondTokens: math.MaxUint32, minuteTokens: math.MaxUint32}
	for _, p := range c {
		out.requests = min(out.requests, int64(p.requests))
		out.near = min(out.near, int64(p.near))
		out.secondTokens = min(out.secondTokens, windowCount(p.second, sec))
		out.minuteTokens = min(out.minuteTokens, windowCount(p.minute, minute))
	}
	return out
}

// windowCount reads a second or minute count: 0 if it is of another window.
func windowCount(v uint64, window uint32) int64 {
	if uint32(v>>32) != window {
		return 0
	}
	return int64(v & math.MaxUint32)
}

func sat32(n int64) uint32 { return uint32(min(n, math.MaxUint32)) }
