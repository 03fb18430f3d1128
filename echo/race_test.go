//go:build race

package tollgateecho_test

// The race detector adds allocations of its own.
const raceEnabled = true
