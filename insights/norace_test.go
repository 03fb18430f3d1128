//go:build !race

package insights_test

const raceEnabled = false
