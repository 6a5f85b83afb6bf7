//go:build !linux

package e2e

import "os/exec"

func setParentDeathSignal(cmd *exec.Cmd) {}
