package metrickit

import (
	"errors"
	"fmt"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/storekit"
)

// DefaultCardinalityLimit is the number of (plan, policy, route) label sets
// an exporter keeps unless told otherwise.
const DefaultCardinalityLimit = 1000

// DefaultStoreTimeout is the store timeout the latency buckets bracket
// unless told otherwise: the Redis store's default.
const DefaultStoreTimeout = 50 * time.Millisecond

// Options are the settings both exporters take, and the mistakes their
// options met; each exporter's own Option functions set them. The zero
// Options is not usable; call NewOptions.
type Options struct {
	pkg          string // the exporter's package, for errors
	Limit        int
	StoreTimeout time.Duration
	stores       []store
	errs         []error
}

// A store is a store whose statistics an exporter reports, under the label
// store="name".
type store struct {
	name  string
	stats storekit.Reporter
}

// NewOptions returns the defaults of the exporter of package pkg.
func NewOptions(pkg string) Options {
	return Options{pkg: pkg, Limit: DefaultCardinalityLimit, StoreTimeout: DefaultStoreTimeout}
}

// AddStore reports the statistics of s, if it keeps any, under the label
// store=name; option names the exporter's option in errors. A nil s is an
// error, a store without statistics adds nothing.
func (o *Options) AddStore(option, name string, s tollgate.Store) {
	if s == nil {
		o.errs = append(o.errs, fmt.Errorf("%s: %s: the store is nil", o.pkg, option))
		return
	}
	for _, have := range o.stores {
		if have.name == name {
			o.errs = append(o.errs, fmt.Errorf("%s: %s: the %s store is given twice", o.pkg, option, name))
			return
		}
	}
	if r, ok := s.(storekit.Reporter); ok {
		o.stores = append(o.stores, store{name, r})
	}
}

// Fail records err, a mistake of an exporter's own option.
func (o *Options) Fail(err error) { o.errs = append(o.errs, err) }

// Err returns every mistake of o, each naming its option, or nil.
func (o *Options) Err() error {
	errs := o.errs
	if o.Limit < 1 {
		errs = append(errs, fmt.Errorf("%s: WithCardinalityLimit must be >= 1, got %d", o.pkg, o.Limit))
	}
	if o.StoreTimeout <= 0 {
		errs = append(errs, fmt.Errorf("%s: WithStoreTimeout must be > 0, got %v", o.pkg, o.StoreTimeout))
	}
	return errors.Join(errs...)
}
