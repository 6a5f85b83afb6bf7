package cni

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/minikit/minikit/internal/testutil"

	"github.com/minikit/minikit/internal/netns"
	"golang.org/x/sys/unix"
)

// runID makes every namespace a test run creates recognisable as its own:
// "mkt-<runID>-...". Tests never touch namespaces without that prefix.
var runID = func() string {
	b := make([]byte, 3)
	rand.Read(b)
	return hex.EncodeToString(b)
}()

var nameSeq atomic.Int32

// testName returns a fresh namespace name owned by this test run.
func testName(kind string) string {
	return fmt.Sprintf("mkt-%s-%d-%s", runID, nameSeq.Add(1), kind)
}

// testVeth returns a fresh interface name of at most 15 bytes.
func testVeth() string {
	b := make([]byte, 4)
	rand.Read(b)
	return "vt" + hex.EncodeToString(b)
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces")
	}
}

// TestMain checks, around the whole run, that the root network namespace
// is untouched and puts back the mount points the run had to create
// (/run/netns, /run/minikit/ns) if they were not there before.
func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		os.Exit(m.Run())
	}
	guard := testutil.GuardRoot()
	netnsDirExisted, netnsWasMount := exists(netns.NetNSDir), isMountPoint(netns.NetNSDir)
	minikitExisted, podDirExisted, podWasMount := exists("/run/minikit"), exists(PodNSDir), isMountPoint(PodNSDir)

	code := m.Run()

	if !podWasMount && isMountPoint(PodNSDir) {
		if err := unix.Unmount(PodNSDir, 0); err != nil {
			fmt.Fprintf(os.Stderr, "unmounting %s: %v\n", PodNSDir, err)
			code = 1
		}
	}
	if !podDirExisted {
		os.Remove(PodNSDir)
	}
	if !minikitExisted {
		os.Remove("/run/minikit")
	}
	// Another process may have pinned namespaces under /run/netns since;
	// then the unmount fails with EBUSY and the mount stays, as iproute2
	// would leave it.
	if !netnsWasMount && isMountPoint(netns.NetNSDir) {
		unix.Unmount(netns.NetNSDir, 0)
	}
	if !netnsDirExisted {
		os.Remove(netns.NetNSDir) // only succeeds if empty
	}

	if mounts := mountsUnder("/run/minikit"); !podWasMount && len(mounts) > 0 {
		fmt.Fprintf(os.Stderr, "mounts left under /run/minikit: %v\n", mounts)
		code = 1
	}
	if !guard.Intact("mkt-"+runID, netns.ListNamed) {
		code = 1
	}
	os.Exit(code)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// mountPoints returns the mount points of the process's mount namespace,
// as seen by an ordinary (unlocked) thread.
func mountPoints() []string {
	f, err := os.Open("/proc/thread-self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 {
			out = append(out, unescapeMountinfo(fields[4]))
		}
	}
	return out
}

// unescapeMountinfo undoes the octal escapes (\040 for space, ...) of
// /proc/self/mountinfo.
func unescapeMountinfo(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isMountPoint(path string) bool { return slices.Contains(mountPoints(), path) }

func mountsUnder(dir string) []string {
	var out []string
	for _, mp := range mountPoints() {
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out
}

// newNamedNS creates a named netns owned by the test and removed with it.
func newNamedNS(t *testing.T, kind string) string {
	t.Helper()
	name := testName(kind)
	if err := netns.CreateNamed(name); err != nil {
		t.Fatalf("CreateNamed(%q): %v", name, err)
	}
	t.Cleanup(func() {
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("DeleteNamed(%q): %v", name, err)
		}
	})
	return name
}
