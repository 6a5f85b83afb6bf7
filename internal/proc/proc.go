// Package proc reads and signals processes by PID through /proc: what the
// kubelet needs to adopt its containers after a restart and the lab needs to
// know its hosts' minikit processes, each named for good by PID and start
// time (a PID alone may be reused).
package proc

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Stat reads the fields of /proc/PID/stat that follow the command name
// (state, ppid, pgrp, ...; proc(5) numbers them from 3), or nil when the
// process is gone or a zombie.
func Stat(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	f := strings.Fields(s[i+1:])
	if len(f) == 0 || f[0] == "Z" {
		return nil
	}
	return f
}

// Alive says whether pid is a process that has not exited (a zombie has).
func Alive(pid int) bool { return Stat(pid) != nil }

// StartTime reads a process's start time in clock ticks since boot (0 if it
// is gone or a zombie): with its PID, it names one process for good.
func StartTime(pid int) uint64 {
	f := Stat(pid)
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}

// Cmdline is the process's command line, its arguments separated by NUL
// bytes ("" when it is gone).
func Cmdline(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return string(b)
}

// SignalGroup sends sig to pid's process group (a container, a lab host's
// minikit and what they started) and to pid itself, in case it left the group.
func SignalGroup(pid int, sig syscall.Signal) {
	syscall.Kill(-pid, sig)
	syscall.Kill(pid, sig)
}
