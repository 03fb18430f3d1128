// Package testhooks gives the module's test kits (adaptertest, storetest)
// options that are not public API, such as the Limiter's test clock. The
// packages that own the options fill the variables in at init; the values
// are typed any to keep this package free of imports.
package testhooks

import "time"

// LimiterClock returns a tollgate.Option that makes a Limiter read the time
// of its decisions from now.
var LimiterClock func(now func() time.Time) any
