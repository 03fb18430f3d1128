package insights

import "hash/maphash"

// The size of a sketch: 4 rows of 4,096 counters, 64 KiB. With
// conservative update, a count is over-stated by at most about
// e/4096 (0.07 %) of the bucket's requests, with probability 1-e^-4 (98 %):
// little beside the requests of a tenant that hits its limit.
const (
	sketchDepth = 4
	sketchWidth = 4096
)

// A sketch is a count-min sketch (Cormode and Muthukrishnan, 2005) with
// conservative update: it counts the requests of every tenant of the open
// bucket in fixed memory, so that a tenant that enters the summary on its
// first throttled request starts with the requests it made before it, and
// its throttled share is a share of all its requests. A count is never
// under-stated. It is not safe for concurrent use; the Tracker locks
// around it.
type sketch struct {
	seed maphash.Seed
	rows [sketchDepth][sketchWidth]uint32
}

func newSketch() *sketch { return &sketch{seed: maphash.MakeSeed()} }

// cells returns the counter of tenant in each row, by double hashing one
// 64-bit hash.
func (s *sketch) cells(tenant string) [sketchDepth]*uint32 {
	h := maphash.String(s.seed, tenant)
	h1, h2 := uint32(h), uint32(h>>32)|1
	var c [sketchDepth]*uint32
	for i := range c {
		c[i] = &s.rows[i][(h1+uint32(i)*h2)&(sketchWidth-1)]
	}
	return c
}

// add counts one request of tenant and returns its count before it.
func (s *sketch) add(tenant string) int64 {
	c := s.cells(tenant)
	least := *c[0]
	for _, p := range c[1:] {
		least = min(least, *p)
	}
	if least == ^uint32(0) {
		return int64(least)
	}
	for _, p := range c {
		if *p == least {
			*p = least + 1 // conservative update: raise only the lowest
		}
	}
	return int64(least)
}

// count returns tenant's count.
func (s *sketch) count(tenant string) int64 {
	c := s.cells(tenant)
	least := *c[0]
	for _, p := range c[1:] {
		least = min(least, *p)
	}
	return int64(least)
}

func (s *sketch) reset() { s.rows = [sketchDepth][sketchWidth]uint32{} }
