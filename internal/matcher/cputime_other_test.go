//go:build !unix

package matcher

import "time"

// cpuTime is not measured off unix; the metric reads zero.
func cpuTime() time.Duration { return 0 }
