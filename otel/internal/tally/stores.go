package tally

import "github.com/tollgate-go/tollgate/core/memory"

// The store interfaces; tollgateprom and tollgateotel declare the same
// method sets under exported names, with their documentation.
type (
	statsReporter   = interface{ Stats() memory.Stats }
	breakerReporter = interface {
		BreakerState() (state string, opens uint64)
	}
	denialCacheReporter = interface{ DenialCacheAnswers() uint64 }
)

// Breaker states, as BreakerState reports them.
var BreakerStates = []string{"closed", "open", "half_open"}

// A Store is a store whose figures an exporter reports, under the label
// store="Name".
type Store struct {
	Name  string
	Store any
}

// StoreFigures are what a store reports, read at one moment.
type StoreFigures struct {
	Name string

	HasStats         bool
	Keys             int
	Evictions        uint64
	DrainedEvictions uint64

	HasBreaker   bool
	BreakerState string // one of BreakerStates, or "" for a state not known
	BreakerOpens uint64

	HasDenialCache     bool
	DenialCacheAnswers uint64
}

// Read returns what s reports.
func (s Store) Read() StoreFigures {
	f := StoreFigures{Name: s.Name}
	if r, ok := s.Store.(statsReporter); ok {
		st := r.Stats()
		f.HasStats, f.Keys, f.Evictions, f.DrainedEvictions = true, st.Keys, st.Evictions, st.DrainedEvictions
	}
	if r, ok := s.Store.(breakerReporter); ok {
		state, opens := r.BreakerState()
		f.HasBreaker, f.BreakerOpens = true, opens
		for _, known := range BreakerStates {
			if state == known {
				f.BreakerState = known
			}
		}
	}
	if r, ok := s.Store.(denialCacheReporter); ok {
		f.HasDenialCache, f.DenialCacheAnswers = true, r.DenialCacheAnswers()
	}
	return f
}

// Reports reports whether s reports any figure.
func (s Store) Reports() bool {
	switch s.Store.(type) {
	case statsReporter, breakerReporter, denialCacheReporter:
		return true
	}
	return false
}
