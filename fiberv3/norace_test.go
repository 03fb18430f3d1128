//go:build !race

package tollgatefiberv3_test

const raceEnabled = false
