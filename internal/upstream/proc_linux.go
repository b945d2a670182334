package upstream

import (
	"errors"
	"syscall"
	"time"
)

// childProcAttr puts a stdio upstream in its own process group (a signal to
// outboxd's group does not reach it before outboxd decides) and has the
// kernel kill it when outboxd dies, so no child outlives its parent.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// stopGroup ends what is left of a stdio child's process group once the
// child is gone: the grandchildren of an npx, uvx or sh wrapper, which the
// parent-death signal does not reach. SIGTERM, then SIGKILL after grace.
func stopGroup(pgid int, grace time.Duration) {
	if pgid <= 0 || syscall.Kill(-pgid, syscall.SIGTERM) != nil {
		return // no such group: nothing left
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}
