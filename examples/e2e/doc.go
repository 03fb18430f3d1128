// Package e2e holds the end-to-end tests of the example apps. Each app's
// main.go is copied alone into a module of its own and built there, outside
// the workspace, as a user who copies it would build it; those binaries
// run as real processes on loopback ports, on the memory store and on
// redis-server processes that the tests start and kill, and are checked
// over HTTP (and gRPC) against the contract that the docs promise: routes
// and costs, plans, headers, 401 and 429 answers, throttle logs, metrics,
// shadow mode, the admin API and the tollgate CLI, replicas sharing one
// Redis, and Redis down, unreachable or misconfigured. The package has no
// code of its own.
package e2e
