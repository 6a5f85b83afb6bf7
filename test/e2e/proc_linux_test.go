package e2e

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal makes the kernel kill a server if the test binary dies without
// running its cleanups (a panic on timeout), so no server outlives its test.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
