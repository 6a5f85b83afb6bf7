package lab

import (
	"os"
	"os/exec"
	"syscall"
)

// Watchdog removes a lab when the process that made it dies without taking
// it down (go test's -timeout panics in a goroutine of its own and runs no
// t.Cleanup; os.Exit; SIGKILL). It is a small shell that waits for EOF on a
// pipe whose writing end only this process holds, which the kernel closes
// whatever way the process ends, and then runs `minikit lab down`. Its own
// process group keeps a ^C to `go test` from killing it first.
type Watchdog struct {
	cmd  *exec.Cmd
	pipe *os.File
}

// StartWatchdog starts the watchdog of lab name in dir, run by binary.
func StartWatchdog(binary, name, dir string) (*Watchdog, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	// read returns at EOF, when every writer is gone; then lab down.
	cmd := exec.Command("/bin/sh", "-c", `read -r _ || exec "$0" lab down --name "$1" --dir "$2" >/dev/null 2>&1`, binary, name, dir)
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	r.Close()
	return &Watchdog{cmd: cmd, pipe: w}, nil
}

// Stop ends the watchdog without a lab down (the lab was taken down, or
// never came up): a line on the pipe makes read succeed, and the shell exits.
func (w *Watchdog) Stop() {
	w.pipe.Write([]byte("done\n"))
	w.pipe.Close()
	w.cmd.Wait()
}
