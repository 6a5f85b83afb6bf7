package proc

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/testutil"
)

func TestThisProcess(t *testing.T) {
	pid := os.Getpid()
	if !Alive(pid) {
		t.Fatal("Alive(self) = false")
	}
	if StartTime(pid) == 0 {
		t.Fatal("StartTime(self) = 0")
	}
	if StartTime(pid) != StartTime(pid) {
		t.Fatal("StartTime changes between reads")
	}
	if !strings.Contains(Cmdline(pid), "proc.test") {
		t.Fatalf("Cmdline(self) = %q, want the test binary", Cmdline(pid))
	}
}

func TestAZombieIsGone(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() { SignalGroup(pid, syscall.SIGKILL); cmd.Wait() })
	if !Alive(pid) || StartTime(pid) == 0 {
		t.Fatalf("a running child: Alive %v, StartTime %d", Alive(pid), StartTime(pid))
	}
	SignalGroup(pid, syscall.SIGKILL)
	// Not reaped yet: a zombie, which counts as gone.
	testutil.Eventually(t, 10*time.Second, "killed child gone", func() error {
		if Alive(pid) || StartTime(pid) != 0 {
			return os.ErrExist
		}
		return nil
	})
}

func TestMissingProcess(t *testing.T) {
	const pid = 1 << 30 // above pid_max
	if Alive(pid) || StartTime(pid) != 0 || Cmdline(pid) != "" || Stat(pid) != nil {
		t.Fatal("a PID that cannot exist reads as a process")
	}
}
