package netns

import (
	"errors"
	"io/fs"
	"os/exec"
	"slices"
	"strings"
	"testing"

	vnetns "github.com/vishvananda/netns"
)

// newNamedNS creates a named netns owned by the test and removed with it.
func newNamedNS(t *testing.T, kind string) string {
	t.Helper()
	name := testName(kind)
	if err := CreateNamed(name); err != nil {
		t.Fatalf("CreateNamed(%q): %v", name, err)
	}
	t.Cleanup(func() {
		if err := DeleteNamed(name); err != nil {
			t.Errorf("DeleteNamed(%q): %v", name, err)
		}
	})
	return name
}

func currentNSID(t *testing.T) string {
	t.Helper()
	h, err := vnetns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	return h.UniqueId()
}

func nsIDOf(t *testing.T, name string) string {
	t.Helper()
	h, err := vnetns.GetFromPath(NetNSPath(name))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	return h.UniqueId()
}

func TestNamedNamespaceLifecycle(t *testing.T) {
	requireRoot(t)
	name := newNamedNS(t, "life")

	if !ExistsNamed(name) {
		t.Fatalf("ExistsNamed(%q) = false after CreateNamed", name)
	}
	if err := CreateNamed(name); !errors.Is(err, fs.ErrExist) {
		t.Errorf("second CreateNamed(%q) = %v, want fs.ErrExist", name, err)
	}
	got, err := ListNamed("mkn-" + runID)
	if err != nil || !slices.Contains(got, name) {
		t.Errorf("ListNamed = %v, %v; want it to contain %q", got, err, name)
	}
	// iproute2 sees our namespaces and can run commands in them.
	out, err := exec.Command("ip", "netns", "exec", name, "ip", "-o", "link", "show", "lo").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "lo:") {
		t.Errorf("ip netns exec %s ip link show lo: %v\n%s", name, err, out)
	}
	if nsIDOf(t, name) == currentNSID(t) {
		t.Errorf("named namespace is the root namespace")
	}

	if err := DeleteNamed(name); err != nil {
		t.Fatalf("DeleteNamed(%q): %v", name, err)
	}
	if ExistsNamed(name) {
		t.Errorf("ExistsNamed(%q) = true after DeleteNamed", name)
	}
	if err := DeleteNamed(name); err != nil {
		t.Errorf("DeleteNamed of a missing namespace = %v, want nil", err)
	}
}

func TestNamedRejectsBadNames(t *testing.T) {
	for _, name := range []string{"", ".", "..", "a/b", "../etc"} {
		if err := CreateNamed(name); err == nil {
			t.Errorf("CreateNamed(%q) succeeded", name)
		}
		if err := DeleteNamed(name); err == nil {
			t.Errorf("DeleteNamed(%q) succeeded", name)
		}
	}
}

func TestDoEntersAndRestores(t *testing.T) {
	requireRoot(t)
	name := newNamedNS(t, "do")
	root := currentNSID(t)
	want := nsIDOf(t, name)

	var inside, inGoroutine string
	err := DoPath(NetNSPath(name), func() error {
		inside = currentNSID(t)
		// A goroutine started inside fn runs on another thread, which is
		// still in the namespace the process started in.
		done := make(chan string)
		go func() {
			h, _ := vnetns.Get()
			defer h.Close()
			done <- h.UniqueId()
		}()
		inGoroutine = <-done
		return errors.New("boom")
	})
	if err == nil || err.Error() != "boom" {
		t.Errorf("DoPath returned %v, want fn's error", err)
	}
	if inside != want {
		t.Errorf("inside Do: netns %s, want %s", inside, want)
	}
	if inGoroutine != root {
		t.Errorf("goroutine started inside Do: netns %s, want the root one %s", inGoroutine, root)
	}
	if got := currentNSID(t); got != root {
		t.Errorf("after Do: netns %s, want %s", got, root)
	}
	if err := DoPath("/nonexistent/ns", func() error { return nil }); err == nil {
		t.Errorf("DoPath on a missing file succeeded")
	}
}

func TestDoRepanics(t *testing.T) {
	requireRoot(t)
	name := newNamedNS(t, "panic")
	defer func() {
		if r := recover(); r != "kaboom" {
			t.Errorf("recovered %v, want the panic from fn", r)
		}
	}()
	DoPath(NetNSPath(name), func() error { panic("kaboom") })
}
