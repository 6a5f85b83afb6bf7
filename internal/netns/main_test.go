package netns

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// runID makes every namespace a test run creates recognisable as its own:
// "mkn-<runID>-...". Tests never touch namespaces without that prefix.
var runID = func() string {
	b := make([]byte, 3)
	rand.Read(b)
	return hex.EncodeToString(b)
}()

var nameSeq atomic.Int32

// testName returns a fresh namespace name owned by this test run.
func testName(kind string) string {
	return fmt.Sprintf("mkn-%s-%d-%s", runID, nameSeq.Add(1), kind)
}

// TestMain fails the run when a test left a namespace of its own behind,
// changed the main thread's namespaces or the root namespace's links.
func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		os.Exit(m.Run())
	}
	linksBefore, mainNSBefore := rootLinks(), mainThreadNS()
	code := m.Run()
	if left, _ := ListNamed("mkn-" + runID); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "test namespaces left behind: %v\n", left)
		code = 1
	}
	if after := mainThreadNS(); after != mainNSBefore {
		fmt.Fprintf(os.Stderr, "main thread namespaces changed: before %s, after %s\n", mainNSBefore, after)
		code = 1
	}
	if after := rootLinks(); !slices.Equal(linksBefore, after) {
		fmt.Fprintf(os.Stderr, "root namespace links changed: before %v, after %v\n", linksBefore, after)
		code = 1
	}
	os.Exit(code)
}

// rootLinks lists the links of the process's (root) network namespace;
// TestMain runs on an unswitched thread.
func rootLinks() []string {
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

// mainThreadNS is what /proc/self/ns shows: the main thread's namespaces.
func mainThreadNS() string {
	var out []string
	for _, ns := range []string{"net", "mnt", "uts"} {
		l, _ := os.Readlink("/proc/self/ns/" + ns)
		out = append(out, l)
	}
	return strings.Join(out, " ")
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces")
	}
}
