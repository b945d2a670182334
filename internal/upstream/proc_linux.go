package upstream

import "syscall"

// childProcAttr puts a stdio upstream in its own process group (a signal to
// outboxd's group does not reach it before outboxd decides) and has the
// kernel kill it when outboxd dies, so no child outlives its parent.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
