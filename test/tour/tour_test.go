// Package tour_test runs the tour as its users do: `scripts/tour.sh`, the real
// script, as a subprocess (it builds minikit, brings up a lab, runs every
// examples/*/check.sh and tears the lab down), and checks that every example
// passed and that the machine's root network namespace is exactly as before.
package tour_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minikit/minikit/test/testenv"
)

// TestTour runs the tour six times: with the lab's proxies in iptables mode
// (the default, what the book shows), in nftables mode (`--proxy-mode
// nftables`), over Flannel's VXLAN pod network (`--pod-network vxlan`), on
// an HA control plane of three servers on embedded etcd (`--servers 3`),
// with the server on an external etcd (`--datastore etcd`), and in a
// dual-stack lab (`--ip-family dual`): every example passes in each. The runs
// are parallel subtests, each with its own lab.
func TestTour(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tc := range []struct {
		mode, podNetwork string
		servers          int
		datastore        string
		ipFamily         string
	}{
		{"iptables", "host-gw", 1, "bolt", "ipv4"}, {"nftables", "host-gw", 1, "bolt", "ipv4"}, {"iptables", "vxlan", 1, "bolt", "ipv4"},
		{"iptables", "host-gw", 3, "bolt", "ipv4"}, {"iptables", "host-gw", 1, "etcd", "ipv4"}, {"iptables", "host-gw", 1, "bolt", "dual"},
	} {
		name := tc.mode + "/" + tc.podNetwork
		if tc.servers > 1 {
			name += fmt.Sprintf("/%d-servers", tc.servers)
		}
		if tc.datastore != "bolt" {
			name += "/" + tc.datastore
		}
		if tc.ipFamily != "ipv4" {
			name += "/" + tc.ipFamily
		}
		t.Run(name, func(t *testing.T) {
			// Two at a time (go test's -parallel, GOMAXPROCS here): a tour
			// mostly waits for its lab, and each has a lab of its own.
			t.Parallel()
			tour(t, tc.mode, tc.podNetwork, tc.servers, tc.datastore, tc.ipFamily)
		})
	}
}

func tour(t *testing.T, mode, podNetwork string, servers int, datastore, ipFamily string) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	checks, err := filepath.Glob(filepath.Join(repo, "examples", "*", "check.sh"))
	if err != nil || len(checks) == 0 {
		t.Fatalf("no examples/*/check.sh found (%v)", err)
	}
	b := make([]byte, 3)
	rand.Read(b)
	name := "tour" + hex.EncodeToString(b) // unique: other tests' labs may run alongside
	mine := func(ns string) bool { return strings.HasPrefix(ns, name+"-") }
	before := testenv.RootSnapshot(t, mine)

	// Generous: the tour takes about a minute and a half on an idle machine.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(repo, "scripts", "tour.sh"), "--proxy-mode", mode, "--pod-network", podNetwork,
		"--servers", strconv.Itoa(servers), "--datastore", datastore, "--ip-family", ipFamily)
	cmd.Dir = repo
	// deps.sh is skipped (CI installs the packages beforehand); the checks are the same.
	cmd.Env = append(os.Environ(), "MINIKIT_SKIP_DEPS=1", "LAB="+name, "VERBOSE=")
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) } // its trap removes the lab
	cmd.WaitDelay = time.Minute
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("scripts/tour.sh --proxy-mode %s --pod-network %s output:\n%s", mode, podNetwork, out.String())
	if flags := fmt.Sprintf("--servers %d --datastore %s --proxy-mode %s --pod-network %s --ip-family %s", servers, datastore, mode, podNetwork, ipFamily); !strings.Contains(out.String(), flags) {
		t.Errorf("the tour did not bring its lab up with %s", flags)
	}
	if err != nil {
		t.Errorf("scripts/tour.sh: %v", err)
	}
	for _, c := range checks {
		example := filepath.Base(filepath.Dir(c))
		pass := regexp.MustCompile(`(?m)^PASS  ` + regexp.QuoteMeta(example) + ` +— \S`)
		if !pass.Match(out.Bytes()) {
			t.Errorf("no PASS line for examples/%s", example)
		}
	}
	if strings.Contains(out.String(), "\nFAIL  ") {
		t.Errorf("the tour printed FAIL lines")
	}

	after := testenv.RootSnapshot(t, mine)
	if before != after {
		t.Errorf("the root network namespace changed:\n%s", lineDiff(before, after))
	}
}

// TestPictures checks that the pictures in the documentation are current:
// scripts/pictures.sh --check draws docs/lab.svg and every example's
// lab.svg and trace.svg again from a lab of its own (stable mode: pods by
// owner and ordinal, allocated addresses by role) and fails naming each
// committed file that differs. Redraw them with sudo ./scripts/pictures.sh.
func TestPictures(t *testing.T) {
	testenv.RequireRoot(t)
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 3)
	rand.Read(b)
	name := "pics" + hex.EncodeToString(b)
	mine := func(ns string) bool { return strings.HasPrefix(ns, name+"-") }
	before := testenv.RootSnapshot(t, mine)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(repo, "scripts", "pictures.sh"), "--check")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "LAB="+name)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) } // its trap removes the lab
	cmd.WaitDelay = time.Minute
	out, err := cmd.CombinedOutput()
	t.Logf("scripts/pictures.sh --check:\n%s", out)
	if err != nil {
		t.Errorf("scripts/pictures.sh --check: %v (the pictures are not current: sudo ./scripts/pictures.sh draws them again)", err)
	}
	// Every picture in the repository is one the script checked.
	pics, _ := filepath.Glob(filepath.Join(repo, "examples", "*", "*.svg"))
	want := len(pics) + 1 // and docs/lab.svg
	if n := strings.Count(string(out), "\ncurrent  "); n != want {
		t.Errorf("%d pictures checked, want the %d in docs/lab.svg and examples/*/*.svg", n, want)
	}
	if after := testenv.RootSnapshot(t, mine); before != after {
		t.Errorf("the root network namespace changed:\n%s", lineDiff(before, after))
	}
}

// lineDiff lists the lines only in a (-) and only in b (+).
func lineDiff(a, b string) string {
	count := func(s string) map[string]int {
		m := map[string]int{}
		for _, l := range strings.Split(s, "\n") {
			m[l]++
		}
		return m
	}
	ca, cb := count(a), count(b)
	var d strings.Builder
	for _, l := range strings.Split(a, "\n") {
		if cb[l] < ca[l] {
			d.WriteString("- " + l + "\n")
		}
	}
	for _, l := range strings.Split(b, "\n") {
		if ca[l] < cb[l] {
			d.WriteString("+ " + l + "\n")
		}
	}
	return d.String()
}
