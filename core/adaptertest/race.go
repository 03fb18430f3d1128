//go:build race

package adaptertest

// The race detector allocates on its own account.
const raceEnabled = true
