//go:build race

package tollgatefiberv3_test

// The race detector adds allocations of its own.
const raceEnabled = true
