//go:build !linux

package upstream

import (
	"syscall"
	"time"
)

// childProcAttr puts a stdio upstream in its own process group. Outside
// Linux there is no parent-death signal: a child of a killed outboxd ends
// when it reads end of file on stdin.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// stopGroup does nothing outside Linux: the child's own end is all.
func stopGroup(int, time.Duration) {}
