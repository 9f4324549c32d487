//go:build unix && !linux

package main

import (
	"runtime"
	"syscall"
)

// peakRSS is the process's peak resident set so far, in bytes
// (getrusage's ru_maxrss: kilobytes on Linux and the BSDs, bytes on
// macOS), and false where it cannot be read.
func peakRSS() (int64, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	if runtime.GOOS == "darwin" || runtime.GOOS == "ios" {
		return int64(ru.Maxrss), true
	}
	return int64(ru.Maxrss) * 1024, true
}
