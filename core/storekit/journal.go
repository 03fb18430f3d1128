package storekit

import (
	"maps"
	"slices"
	"sync"
)

// A Journal keeps overrides and the change log in the process, for a store
// that keeps its state there: its Do applies the SaveOverride and
// LoadOverrides kinds, and the Note of a Reset. The zero Journal is empty
// and ready to use; it is safe for concurrent use.
type Journal struct {
	mu        sync.Mutex
	overrides map[string][]byte
	notes     [][]byte // newest first
	version   int64
}

// Do applies op if it is a SaveOverride or a LoadOverrides, and logs the
// Note of any other kind.
func (j *Journal) Do(op *Op) {
	j.mu.Lock()
	defer j.mu.Unlock()
	switch op.Kind {
	case LoadOverrides:
		op.Overrides, op.Notes = nil, nil
		if op.Version != j.version {
			op.Overrides = maps.Clone(j.overrides)
			if op.Overrides == nil {
				op.Overrides = map[string][]byte{}
			}
			op.Notes = slices.Clone(j.notes)
		}
		op.Version = j.version
		return
	case SaveOverride:
		if op.Value == nil {
			delete(j.overrides, op.Tenant)
		} else {
			if j.overrides == nil {
				j.overrides = make(map[string][]byte)
			}
			j.overrides[op.Tenant] = slices.Clone(op.Value)
		}
		j.version++
		op.Version = j.version
	}
	if op.Note != nil {
		j.notes = append([][]byte{slices.Clone(op.Note)}, j.notes[:min(len(j.notes), MaxNotes-1)]...)
		j.version++
	}
}
