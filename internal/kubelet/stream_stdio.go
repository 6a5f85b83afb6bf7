package kubelet

import (
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/creack/pty"
	corev1 "k8s.io/api/core/v1"
)

// containerStdio is the stdin (and, for tty: true, the terminal) the agent
// gives a container whose spec asks for them, so that attach can reach it.
// The container's output still goes to its log file (through the terminal for
// a tty container), which is where attach reads it.
type containerStdio struct {
	stdin io.WriteCloser // pipe write end, or the ptmx
	ptmx  *os.File
	child *os.File // the container's end, closed here once it started
	log   *os.File // the terminal copy's own handle on the log
	// copied is closed once the terminal's output is all in the log.
	copied chan struct{}
}

// drainTimeout bounds how long a tty container's exit waits for its terminal's
// last output to reach the log: a background process that keeps the terminal
// open must not keep the exit from being seen.
const drainTimeout = 2 * time.Second

// openStdio sets up cmd's stdio for spec: a pseudo-terminal as the
// controlling terminal of a new session for tty: true, a pipe for stdin: true,
// and the log file (already set) otherwise.
func (c *container) openStdio(cmd *exec.Cmd, spec corev1.Container, logf *os.File) (*containerStdio, error) {
	s := &containerStdio{}
	switch {
	case spec.TTY:
		ptmx, tty, err := pty.Open()
		if err != nil {
			return nil, err
		}
		pty.Setsize(ptmx, &pty.Winsize{Rows: 24, Cols: 80})
		lf, err := os.OpenFile(logf.Name(), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			ptmx.Close()
			tty.Close()
			return nil, err
		}
		s.ptmx, s.child, s.log = ptmx, tty, lf
		if spec.Stdin {
			s.stdin = ptmx
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		// A session of its own (its leader's process group is its PID, so
		// signal still reaches the group), with the terminal as controlling tty.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	case spec.Stdin:
		pr, pw, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		s.stdin, s.child = pw, pr
		cmd.Stdin = pr
	}
	return s, nil
}

// abort releases everything after a failed start.
func (s *containerStdio) abort() {
	for _, f := range []*os.File{s.child, s.log, s.ptmx} {
		if f != nil {
			f.Close()
		}
	}
	if s.stdin != nil {
		s.stdin.Close()
	}
}

// started closes the container's end in the agent and starts copying the
// terminal to the log. The copy ends (EIO) when the last holder of the
// terminal closes it; then the terminal is released.
func (s *containerStdio) started() {
	if s.child != nil {
		s.child.Close()
	}
	if s.ptmx != nil {
		s.copied = make(chan struct{})
		go func() {
			defer close(s.copied)
			io.Copy(s.log, s.ptmx)
			s.log.Close()
			s.ptmx.Close()
		}()
	}
}

// exited closes a stdin pipe once the process is gone and, for a terminal,
// waits until what the process wrote to it last is in the log. It runs before
// the exit is recorded: an attach session ends at the exit after one last read
// of the log, and that read must find the output (the prompt's answer, the
// last line of `run -it --rm`), which the terminal's copy may not have
// written yet when the process is reaped. A container writing to its log file
// directly has written everything by then.
func (s *containerStdio) exited() {
	if s.stdin != nil && s.ptmx == nil {
		s.stdin.Close()
	}
	if s.copied != nil {
		t := time.NewTimer(drainTimeout)
		defer t.Stop()
		select {
		case <-s.copied:
		case <-t.C:
		}
	}
}

// attachPoints returns what an attach session connects to: a stdin writer
// (nil without stdin: true), the terminal (nil without tty: true) and a
// channel closed when the process exits.
func (c *container) attachPoints() (io.Writer, *os.File, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	exited := c.exited
	if exited == nil {
		ch := make(chan struct{})
		close(ch)
		exited = ch
	}
	if c.stdin == nil {
		return nil, c.ptmx, exited
	}
	return c.stdin, c.ptmx, exited
}

// closeStdin ends the container's stdin (stdinOnce): a pipe is closed; a
// terminal gets the end-of-file character, as a user's ^D.
func (c *container) closeStdin() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stdin == nil {
		return
	}
	if c.ptmx != nil {
		c.ptmx.Write([]byte{4})
	} else {
		c.stdin.Close()
	}
	c.stdin = nil
}

func (c *container) isRunning() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running
}

// track makes c visible to the streaming handlers; untrack hides it again.
func (w *podWorker) track(c *container) { w.a.live.Store(string(w.uid)+"/"+c.name, c) }

func (w *podWorker) untrack(c *container) { w.a.live.Delete(string(w.uid) + "/" + c.name) }
