//go:build race

package insights_test

// raceEnabled: the race detector slows the tests down about tenfold.
const raceEnabled = true
