package netns

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/minikit/minikit/internal/testutil"
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
	guard := testutil.GuardRoot()
	code := m.Run()
	if !guard.Intact("mkn-"+runID, ListNamed) {
		code = 1
	}
	os.Exit(code)
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces")
	}
}
