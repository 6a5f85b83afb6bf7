package testutil

import (
	"errors"
	"testing"
	"time"
)

func TestEventuallyReturnsOnceTrue(t *testing.T) {
	n := 0
	Eventually(t, time.Minute, "third call", func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
}

// fatalRecorder records Fatalf instead of stopping the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper()                           {}
func (f *fatalRecorder) Fatalf(format string, args ...any) { f.msg = format }

func TestEventuallyFailsWithTheLastError(t *testing.T) {
	rec := &fatalRecorder{TB: t}
	Eventually(rec, 10*time.Millisecond, "never", func() error { return errors.New("still false") })
	if rec.msg == "" {
		t.Fatal("Eventually did not fail on a condition that never held")
	}
}

func TestLoggerWritesToTheTest(t *testing.T) {
	Logger(t).Debug("a line in this test's output")
}
