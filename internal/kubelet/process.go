package kubelet

import (
	"errors"
	"os/exec"
	"syscall"

	"github.com/minikit/minikit/internal/proc"
)

// processes starts and signals the containers' processes: the host's
// (hostProcesses), or in tests a fake, so that pod sync, restarts and probes
// run without root, nsenter or real programs.
type processes interface {
	// start starts cmd and returns its PID, its start time (proc.StartTime)
	// and a function that waits for it to end and returns its exit code,
	// 128+N when signal N ended it.
	start(cmd *exec.Cmd) (pid int, startTime uint64, wait func() int, err error)
	// startTime is proc.StartTime(pid): 0 once the process is gone.
	startTime(pid int) uint64
	// signal sends sig to pid's process group and to pid.
	signal(pid int, sig syscall.Signal)
}

// hostProcesses are processes of this machine.
type hostProcesses struct{}

func (hostProcesses) start(cmd *exec.Cmd) (int, uint64, func() int, error) {
	if err := cmd.Start(); err != nil {
		return 0, 0, nil, err
	}
	pid := cmd.Process.Pid
	wait := func() int {
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return 0
		}
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return pid, proc.StartTime(pid), wait, nil
}

func (hostProcesses) startTime(pid int) uint64 { return proc.StartTime(pid) }

func (hostProcesses) signal(pid int, sig syscall.Signal) { proc.SignalGroup(pid, sig) }
