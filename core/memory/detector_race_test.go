//go:build race

package memory_test

// raceEnabled reports whether the race detector is on; it allocates on its
// own account, so allocation tests skip under it.
const raceEnabled = true
