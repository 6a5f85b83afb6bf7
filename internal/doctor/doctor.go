// Package doctor checks what minikit needs of the machine it runs on, before
// anything else touches the kernel: root or the capabilities, the kernel's
// features (network namespaces, veth, bridge, VXLAN, nf_tables with the
// expressions kube-proxy's nftables mode uses, ipset, conntrack,
// br_netfilter, IPv6), iptables' backend, the tools minikit and a student run,
// cgroup and /run. It owns the words for what is missing and how to get it,
// one line per check, so that `minikit doctor`, `lab up`, `server` and
// `agent` all say the same thing instead of a netlink error deep inside a
// sync.
//
// Every side effect on the machine goes through System, a struct of funcs
// (Host is the real one), so that tests take a feature away one at a time.
// Kernel features are tried for real, not guessed from config files or
// module lists: Host's probe creates a throwaway network namespace on a
// thread that is then discarded, creates links, an nftables table and ipsets
// in it, and leaves nothing behind (the namespace dies with the thread).
// Nothing is cached across processes: a check costs a few milliseconds.
package doctor

import (
	"fmt"
	"io"
	"strings"
	"sync"
)

// Status is the outcome of one check.
type Status string

// Statuses. Missing is only ever reported by a required check, and makes the
// report fail; Warn is something a student would miss but minikit runs
// without.
const (
	OK      Status = "ok"
	Warn    Status = "warn"
	Missing Status = "missing"
)

// Check is the outcome of one check: what was checked, what was found, and
// (unless it is OK) how to get what is missing.
type Check struct {
	Name     string `json:"name"`
	Status   Status `json:"status"`
	Required bool   `json:"required"`
	Message  string `json:"message"`
	Fix      string `json:"fix,omitempty"`
}

// Line is the check as one line of text: status, name, message and (unless
// it is OK) the fix.
func (c Check) Line() string {
	text := c.Message
	if c.Status != OK && c.Fix != "" {
		text += ": " + c.Fix
	}
	return fmt.Sprintf("%-8s %-16s %s", c.Status, c.Name, text)
}

// Report is the outcome of every check that ran, in a fixed order.
type Report struct {
	// OK is false when a required check found something missing.
	OK     bool    `json:"ok"`
	Checks []Check `json:"checks"`
}

// Failed returns the checks that found something required missing.
func (r Report) Failed() []Check {
	var out []Check
	for _, c := range r.Checks {
		if c.Status == Missing {
			out = append(out, c)
		}
	}
	return out
}

// Check returns the check called name, and whether it ran.
func (r Report) Check(name string) (Check, bool) {
	for _, c := range r.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return Check{}, false
}

// WriteText writes one line per check.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	for _, c := range r.Checks {
		b.WriteString(c.Line())
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Err is nil when nothing required is missing, else an error whose text is
// the failing checks' lines, so that a command that cannot run here stops
// with the doctor's words. command names what was about to run.
func (r Report) Err(command string) error {
	failed := r.Failed()
	if len(failed) == 0 {
		return nil
	}
	lines := make([]string, len(failed))
	for i, c := range failed {
		lines[i] = c.Line()
	}
	return fmt.Errorf("%s cannot run on this machine (sudo minikit doctor checks everything):\n%s",
		command, strings.Join(lines, "\n"))
}

// Options say which checks to run and for whom.
type Options struct {
	// Command is what the fixes tell the user to rerun with sudo
	// (default "minikit doctor").
	Command string
	// RequiredOnly runs only the checks that can find something missing,
	// as `lab up`, `server` and `agent` do before they start; the others
	// (kubectl, Go, cgroup, IPv6, br_netfilter) only ever warn.
	RequiredOnly bool
	// NetNS is the network namespace (a path such as /run/netns/NAME)
	// whose settings the per-namespace checks read (IPv6, br_netfilter's
	// sysctls); empty is the doctor's own.
	NetNS string
	// ServerVersion is the Kubernetes version minikit's API serves
	// ("v1.32.0"): kubectl more than one minor version away is warned
	// about. Empty skips that comparison.
	ServerVersion string
}

// check is one entry of the fixed list of checks.
type check struct {
	name     string
	required bool
	run      func(e *env) (Status, string, string) // status, message, fix
}

// env is what the checks of one Run share: the machine and the kernel
// probe, run at most once and only when a check needs it.
type env struct {
	sys       System
	opts      Options
	probeOnce sync.Once
	probe     Probe
}

// kernel returns the probe's results, probing on first use.
func (e *env) kernel() Probe {
	e.probeOnce.Do(func() {
		if e.sys.Probe != nil {
			e.probe = e.sys.Probe()
		}
		if e.probe == nil {
			e.probe = Probe{}
		}
	})
	return e.probe
}

// Run runs the checks against sys and reports them in a fixed order.
func Run(sys System, opts Options) Report {
	if opts.Command == "" {
		opts.Command = "minikit doctor"
	}
	e := &env{sys: sys, opts: opts}
	r := Report{OK: true}
	for _, c := range checks {
		if opts.RequiredOnly && !c.required {
			continue
		}
		status, msg, fix := c.run(e)
		if status == Missing && !c.required {
			status = Warn
		}
		if status == OK {
			fix = ""
		}
		r.Checks = append(r.Checks, Check{Name: c.name, Status: status, Required: c.required, Message: msg, Fix: fix})
		if status == Missing {
			r.OK = false
		}
	}
	return r
}
