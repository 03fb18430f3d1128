//go:build race

package tollgateechov5_test

// The race detector adds allocations of its own.
const raceEnabled = true
