//go:build !unix

package embeddedpg

import "syscall"

// ownProcessGroup: elsewhere the watchdog (a /bin/sh script) does not run
// anyway, and Start says so.
func ownProcessGroup() *syscall.SysProcAttr { return nil }
