// Package testutil is the test toolkit every package's tests share: waiting
// for a condition, and a logger that writes into the test's own output.
// Tests import it; production code must not (test/layout checks).
package testutil

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// Eventually polls cond every 50 ms until it returns nil and fails the test
// with what and cond's last error when d has passed. It asserts that a state
// is reached, not how fast: pick d generously, as a limit, never a target.
func Eventually(t testing.TB, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	var err error
	for {
		if err = cond(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not true after %v: %v", what, d, err)
}

// Logger returns a debug-level text logger writing into t's output, so a
// component's log lines show up with the test that produced them (and only
// when it fails or runs with -v).
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// RootLinks lists the links of the test process's network namespace, sorted:
// a TestMain compares it before and after a kernel-tier run to prove the
// tests left the root namespace's links alone. Call it on an unswitched
// thread (TestMain's).
func RootLinks() []string {
	ifs, err := net.Interfaces()
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	var names []string
	for _, i := range ifs {
		names = append(names, i.Name)
	}
	slices.Sort(names)
	return names
}

// MainThreadNamespaces is what /proc/self/ns shows: the network, mount and
// UTS namespaces of the process's main thread, which namespace work must
// never leave switched.
func MainThreadNamespaces() string {
	var out []string
	for _, ns := range []string{"net", "mnt", "uts"} {
		l, _ := os.Readlink("/proc/self/ns/" + ns)
		out = append(out, l)
	}
	return strings.Join(out, " ")
}

// RootGuard is what a kernel-tier TestMain records before its run: the root
// namespace's links and the main thread's namespaces.
type RootGuard struct {
	links  []string
	mainNS string
}

// GuardRoot records the root namespace's links and the main thread's
// namespaces. Call it from TestMain, before m.Run.
func GuardRoot() RootGuard {
	return RootGuard{links: RootLinks(), mainNS: MainThreadNamespaces()}
}

// Intact reports on stderr, and with false, a run that left behind
// namespaces of its own (those list finds under prefix, the run's own
// naming), switched the main thread's namespaces or changed the root
// namespace's links.
func (g RootGuard) Intact(prefix string, list func(prefix string) ([]string, error)) bool {
	ok := true
	if left, _ := list(prefix); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "test namespaces left behind: %v\n", left)
		ok = false
	}
	if after := MainThreadNamespaces(); after != g.mainNS {
		fmt.Fprintf(os.Stderr, "main thread namespaces changed: before %s, after %s\n", g.mainNS, after)
		ok = false
	}
	if after := RootLinks(); !slices.Equal(g.links, after) {
		fmt.Fprintf(os.Stderr, "root namespace links changed: before %v, after %v\n", g.links, after)
		ok = false
	}
	return ok
}
