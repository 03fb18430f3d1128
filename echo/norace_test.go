//go:build !race

package tollgateecho_test

const raceEnabled = false
