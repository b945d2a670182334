//go:build !linux

package declared

import "syscall"

// childProcAttr puts a stdio upstream in its own process group. Outside
// Linux there is no parent-death signal: a child of a killed outboxd ends
// when it reads end of file on stdin.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
