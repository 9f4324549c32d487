//go:build !race

package sim

// raceEnabled says the test binary was built with -race.
const raceEnabled = false
