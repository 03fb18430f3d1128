// Package memory is an in-process tollgate.Store for services that run as a
// single instance: GCRA buckets held in a sharded hash table whose lookups
// and updates take no lock.
//
// Each bucket is one word, its theoretical arrival time, updated with a
// compare-and-swap. Buckets that are full again are dropped in the background,
// which changes no decision, and a hard cap on tracked keys bounds memory
// against floods of made-up tenant IDs. When the cap is reached, buckets are
// evicted in order of how little of their burst is spent, so that a flood of
// new keys does not hand throttled tenants a fresh burst; see WithMaxKeys.
package memory
