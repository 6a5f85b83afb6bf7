package lab

import (
	"os/exec"
	"syscall"
)

func execCommand(name string, args ...string) *exec.Cmd { return exec.Command(name, args...) }

func setpgid(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }
