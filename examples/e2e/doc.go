// Package e2e holds the end-to-end tests of the example apps: each app is
// built once, started as a real process on a loopback port and checked over
// HTTP against the contract that docs and users rely on (routes and costs,
// plans, headers, 401 and 429 answers, throttle logs), with the memory
// store, with two replicas sharing Redis, and with Redis down; and the
// trial plan's daily quota and the reports budget on every store that can
// apply them. The package has no code of its own.
package e2e
