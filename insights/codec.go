package insights

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// The encoding of a bucket's summary in an Exchange: compact (a few dozen
// bytes a tenant, so a full bucket of 1,000 tenants is tens of kilobytes)
// and checked field by field when read, since another replica, another
// version or anyone with access to the store may have written it.
//
//	"TGI2" width:uvarint start:varint floor:uvarint total:uvarint n:uvarint record*n
//	record = tenant:string plan:string 10*uvarint (weight, overcount, throttled,
//	         throttledTokens, shadow, near, requests, peakSecond, peakMinute, inFlight) first:varint last:varint fit:varint nroutes:uvarint
//	         (method:string route:string throttled:uvarint)*nroutes
//	string = length:uvarint bytes
//
// Summaries of the version before ("TGI1", without inFlight) are read too,
// so that a replica of this version counts those of older ones while a
// fleet is upgraded; older ones skip this version's.
const (
	codecMagic   = "TGI2"
	codecMagicV1 = "TGI1"
)

// maxCodecString bounds a string in an encoded summary: tenant IDs are at
// most tollgate.MaxTenantLength bytes, plan names and routes shorter still.
const maxCodecString = 1024

func encode(f *frozen) []byte {
	b := make([]byte, 0, 32+len(f.records)*64)
	b = append(b, codecMagic...)
	b = binary.AppendUvarint(b, uint64(f.width))
	b = binary.AppendVarint(b, f.start)
	b = binary.AppendUvarint(b, uint64(f.floor))
	b = binary.AppendUvarint(b, uint64(f.total))
	b = binary.AppendUvarint(b, uint64(len(f.records)))
	for i := range f.records {
		r := &f.records[i]
		b = appendString(b, r.tenant)
		b = appendString(b, r.plan)
		for _, v := range r.counts() {
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

// counts returns the tally's counts in their encoded order.
func (t *tally) counts() [10]*int64 {
	return [10]*int64{&t.weight, &t.overcount, &t.throttled, &t.throttledTokens, &t.shadow,
		&t.near, &t.requests, &t.peakSecond, &t.peakMinute, &t.inFlight}
}

// countsV1 is how many counts a record of the version before holds.
const countsV1 = 9

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// errCorrupt is wrapped by the errors of decode.
var errCorrupt = errors.New("insights: corrupt summary")

// A reader decodes an encoded summary, remembering the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: bad %s", errCorrupt, what)
	}
}

func (r *reader) uvarint(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 || v > math.MaxInt64 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return int64(v)
}

func (r *reader) varint(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) string(what string) string {
	n := r.uvarint(what)
	if r.err != nil {
		return ""
	}
	if n > maxCodecString || n > int64(len(r.b)) {
		r.fail(what)
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// decode reads a summary that encode wrote. It rejects anything else with
// an error wrapping errCorrupt, never panics, and allocates in proportion
// to the input, keeping at most k records (the heaviest).
func decode(data []byte, k int) (*frozen, error) {
	if len(data) < len(codecMagic) {
		return nil, fmt.Errorf("%w: not a summary of this version", errCorrupt)
	}
	v1 := string(data[:len(codecMagicV1)]) == codecMagicV1
	if !v1 && string(data[:len(codecMagic)]) != codecMagic {
		return nil, fmt.Errorf("%w: not a summary of this version", errCorrupt)
	}
	r := &reader{b: data[len(codecMagic):]}
	f := &frozen{}
	f.width = r.uvarint("width")
	f.start = r.varint("start")
	f.floor = r.uvarint("floor")
	f.total = r.uvarint("total")
	n := r.uvarint("record count")
	if r.err == nil && (f.width == 0 || n > MaxCapacity || n > int64(len(r.b))) {
		r.fail("header")
	}
	if r.err != nil {
		return nil, r.err
	}
	f.records = make([]record, 0, n)
	seen := make(map[string]struct{}, n)
	for range n {
		var rec record
		rec.tenant = r.string("tenant")
		rec.plan = r.string("plan")
		counts := rec.counts()
		fields := len(counts)
		if v1 {
			fields = countsV1
		}
		for _, v := range counts[:fields] {
			*v = r.uvarint("count")
		}
		rec.first = r.varint("first seen")
		rec.last = r.varint("last seen")
		rec.fit = r.varint("fit")
		if r.err == nil && (rec.fit < -1 || rec.fit > maxPlans) {
			r.fail("fit")
		}
		nr := r.uvarint("route count")
		if r.err == nil && nr > maxRoutes {
			// Read no routes: the count, however large, is not a bound.
			r.fail("route count")
			nr = 0
		}
		for range nr {
			rec.routes = append(rec.routes, route{method: r.string("method"), route: r.string("route"), throttled: r.uvarint("route count")})
		}
		if r.err != nil {
			return nil, r.err
		}
		if _, dup := seen[rec.tenant]; dup || rec.tenant == "" {
			return nil, fmt.Errorf("%w: empty or repeated tenant", errCorrupt)
		}
		seen[rec.tenant] = struct{}{}
		f.records = append(f.records, rec)
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the records", errCorrupt, len(r.b))
	}
	sortRecords(f.records)
	if len(f.records) > k {
		f.floor = max(f.floor, f.records[k].weight)
		f.records = f.records[:k:k]
	}
	return f, nil
}
