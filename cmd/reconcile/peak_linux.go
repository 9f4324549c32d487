package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// peakRSS is the process's peak resident set so far, in bytes: VmHWM of
// /proc/self/status, and false where it cannot be read. Not getrusage's
// ru_maxrss: a process started by vfork (os/exec, a shell) inherits its
// parent's high-water mark at exec in ru_maxrss, so a reconcile started by
// a large parent would report the parent's peak; VmHWM is this image's
// alone.
func peakRSS() (int64, bool) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024, err == nil
		}
	}
	return 0, false
}
