//go:build !race

package tollgateechov5_test

const raceEnabled = false
