package dbserver

import "syscall"

// sysProcAttr puts a server in its own process group and kills it when the
// thread that started it, and so the program, dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
