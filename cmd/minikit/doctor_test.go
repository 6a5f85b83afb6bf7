package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/doctor"
	"github.com/minikit/minikit/internal/doctor/doctortest"

	"github.com/spf13/cobra"
)

// TestMain gives every test of the CLI a healthy fake machine: the commands
// that check the machine first (lab up, server, agent) then get past the
// doctor without root and without probing this kernel, which
// internal/doctor's own tests do for real.
func TestMain(m *testing.M) {
	hostSystem = doctortest.Healthy().System
	os.Exit(m.Run())
}

// withMachine makes the doctor see m for the rest of the test.
func withMachine(t *testing.T, m *doctortest.Machine) {
	t.Helper()
	prev := hostSystem
	hostSystem = m.System
	t.Cleanup(func() { hostSystem = prev })
}

const nftMissing = "missing  nft              nft is not on PATH (minikit trace and the examples read nftables rules with it): apt-get install --no-install-recommends nftables"

func TestDoctorCommand(t *testing.T) {
	out, err := run(t, "doctor")
	if err != nil {
		t.Fatalf("doctor on a healthy machine: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 20 || !strings.HasPrefix(lines[0], "ok       root ") || !strings.HasPrefix(lines[5], "ok       nftables         nf_tables with numgen, nat, ct, fib") {
		t.Errorf("doctor output:\n%s", out)
	}

	m := doctortest.Healthy()
	delete(m.Tools, "nft")
	delete(m.Tools, "kubectl")
	withMachine(t, m)
	out, err = run(t, "doctor")
	if err == nil || err.Error() != "this machine lacks what minikit needs: nft (see the missing lines above)" {
		t.Errorf("doctor without nft: err = %v", err)
	}
	if !strings.Contains(out, "\n"+nftMissing+"\n") || !strings.Contains(out, "\nwarn     kubectl ") {
		t.Errorf("doctor without nft and kubectl:\n%s", out)
	}

	out, err = run(t, "doctor", "-o", "json")
	if err == nil {
		t.Errorf("doctor -o json without nft succeeds")
	}
	var r doctor.Report
	if jerr := json.Unmarshal([]byte(out), &r); jerr != nil {
		t.Fatalf("doctor -o json: %v\n%s", jerr, out)
	}
	if c, _ := r.Check("nft"); r.OK || c.Line() != nftMissing {
		t.Errorf("doctor -o json: ok=%v, nft %q", r.OK, c.Line())
	}

	if _, err := run(t, "doctor", "-o", "wide"); err == nil || !strings.Contains(err.Error(), `invalid value "wide" for -o/--output`) {
		t.Errorf("doctor -o wide: %v", err)
	}
}

// TestCommandsStopWithTheDoctorsWords: lab up, server and agent run the
// required checks before anything else and stop with the failing lines. Each
// is given arguments it refuses by itself before touching anything, so that
// on a healthy machine it gets past the doctor and fails with its own error.
func TestCommandsStopWithTheDoctorsWords(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cmd    func() *cobra.Command
		args   []string
		ownErr string // what it says when the doctor lets it through
	}{
		{"lab up", newLabCommand, []string{"up", "--datastore", "nonsense", "--name", "mkdoc-never", "--dir", t.TempDir(), "--kubeconfig-merge=false"}, "unknown datastore"},
		{"server", newServerCommand, []string{"--listen", "not-an-address", "--data-dir", t.TempDir()}, "parsing --listen"},
		{"agent", newAgentCommand, []string{"--token", "t", "--data-dir", t.TempDir()}, "--server must be an https:// URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exec := func() error {
				c := tc.cmd()
				c.SetArgs(tc.args)
				c.SetOut(new(bytes.Buffer))
				c.SilenceUsage, c.SilenceErrors = true, true
				return c.Execute()
			}
			if err := exec(); err == nil || !strings.Contains(err.Error(), tc.ownErr) {
				t.Errorf("on a healthy machine: %v, want its own error %q", err, tc.ownErr)
			}
			m := doctortest.Healthy()
			delete(m.Tools, "nft")
			delete(m.Tools, "kubectl") // only warns: not in the error
			withMachine(t, m)
			err := exec()
			if err == nil {
				t.Fatal("without nft: no error")
			}
			want := " cannot run on this machine (sudo minikit doctor checks everything):\n" + nftMissing
			if !strings.HasSuffix(err.Error(), want) || strings.Contains(err.Error(), "kubectl") {
				t.Errorf("without nft:\n%v\nwant it to end with:\n%s", err, want)
			}
			if m.Probes() != 1 {
				t.Errorf("probed the kernel %d times, want once", m.Probes())
			}
		})
	}
}

// TestServerWithoutAgentNeedsNoKernel: --disable-agent makes no kernel
// changes, so it does not stop for a missing kernel feature.
func TestServerWithoutAgentNeedsNoKernel(t *testing.T) {
	m := doctortest.Healthy()
	m.Probe[doctor.FeatureVXLAN] = os.ErrInvalid
	withMachine(t, m)
	c := newServerCommand()
	c.SetArgs([]string{"--disable-agent", "--listen", "not-an-address", "--data-dir", t.TempDir()})
	c.SilenceUsage, c.SilenceErrors = true, true
	if err := c.Execute(); err == nil || !strings.Contains(err.Error(), "parsing --listen") {
		t.Errorf("server --disable-agent: %v, want its own error", err)
	}
	if m.Probes() != 0 {
		t.Errorf("server --disable-agent probed the kernel")
	}
}
