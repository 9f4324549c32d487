//go:build unix

package embeddedpg

import "syscall"

// ownProcessGroup puts the watchdog in a process group of its own: a
// Ctrl-C at the terminal must not end it before the process it watches
// has cleaned up.
func ownProcessGroup() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
