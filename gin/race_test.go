//go:build race

package tollgategin_test

// The race detector adds allocations of its own.
const raceEnabled = true
