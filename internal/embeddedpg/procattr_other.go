//go:build !unix

package embeddedpg

import "syscall"

// ownProcessGroup: elsewhere the watchdog (a /bin/sh script) does not run
// anyway: Start then fails on starting it.
func ownProcessGroup() *syscall.SysProcAttr { return nil }
