//go:build !race

package tollgategin_test

const raceEnabled = false
