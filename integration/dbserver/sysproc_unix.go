//go:build unix && !linux

package dbserver

import "syscall"

// sysProcAttr puts a server in its own process group.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
