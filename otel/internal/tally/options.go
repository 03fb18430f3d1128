package tally

import (
	"errors"
	"fmt"
	"time"
)

// Options are the settings both exporters take, and the errors their
// options met; each exporter's own options set them.
type Options struct {
	Limit        int
	StoreTimeout time.Duration
	Stores       []Store
	Errs         []error
}

// AddStore records s as the store called name, or, if s is nil, an error
// that names the option (pkg: the exporter's package, for the message).
func (o *Options) AddStore(pkg, option, name string, s any) {
	if s == nil {
		o.Errs = append(o.Errs, fmt.Errorf("%s: %s: the store is nil", pkg, option))
		return
	}
	o.Stores = append(o.Stores, Store{Name: name, Store: s})
}

// Err returns every problem of o, each naming its option, or nil.
func (o *Options) Err(pkg string) error {
	errs := o.Errs
	if o.Limit < 1 {
		errs = append(errs, fmt.Errorf("%s: WithCardinalityLimit must be >= 1, got %d", pkg, o.Limit))
	}
	if o.StoreTimeout <= 0 {
		errs = append(errs, fmt.Errorf("%s: WithStoreTimeout must be > 0, got %v", pkg, o.StoreTimeout))
	}
	seen := map[string]bool{}
	for _, s := range o.Stores {
		if seen[s.Name] {
			errs = append(errs, fmt.Errorf("%s: the %s store is given twice", pkg, s.Name))
		}
		seen[s.Name] = true
	}
	return errors.Join(errs...)
}
