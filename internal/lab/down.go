package lab

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/minikit/minikit/internal/proc"

	"github.com/minikit/minikit/internal/cni"
	"github.com/minikit/minikit/internal/kubelet"
	"github.com/minikit/minikit/internal/netns"
)

// ErrNoLab is returned by DownByName when nothing of the lab exists: no
// record, no directory, no namespace.
var ErrNoLab = errors.New("no such lab")

// Down stops the lab's processes and removes its namespaces, pods and directory.
func (l *Lab) Down() error {
	return down(l.state, l.cfg.Binary, l.log)
}

// DownByName removes lab name, found in dir when given, else where the
// registry says it is, else in its default directory; also after a crash of
// `lab up`, and also without a state file (then from the namespaces that
// carry the lab's name).
func DownByName(name, dir, binary string, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	_, registered := Lookup(name)
	dir = resolveDir(name, dir)
	st, err := readState(dir)
	if err != nil {
		st = State{Name: name, Dir: dir, PIDs: map[string]int{}}
		for _, h := range []string{"net", Router, Client, External} {
			if netns.ExistsNamed(NS(name, h)) {
				st.Namespaces = append(st.Namespaces, NS(name, h))
			}
		}
		for i := 1; i <= 50; i++ {
			if netns.ExistsNamed(NS(name, nodeName(i))) {
				st.Namespaces = append(st.Namespaces, NS(name, nodeName(i)))
				st.Nodes = i
			}
		}
		if _, err := os.Stat(dir); err != nil && len(st.Namespaces) == 0 && !registered {
			return fmt.Errorf("%w %q: not in %s, no %s, no namespace %s", ErrNoLab, name, RegistryDir, dir, NS(name, "*"))
		}
	}
	if st.Dir == "" {
		st.Dir = dir
	}
	return down(st, binary, log)
}

// procID is a process by PID and start time: PIDs are reused.
type procID struct {
	pid   int
	start uint64
}

func (p procID) running() bool { return proc.Alive(p.pid) && proc.StartTime(p.pid) == p.start }

// names are the names of the lab's own network namespaces: those its state
// records, newest first. (Only those: a namespace with a lab host's name that
// the lab did not make, as when lab up failed because it was taken, is not
// the lab's to remove.)
func (st State) names() []string {
	seen := map[string]bool{}
	var out []string
	for i := len(st.Namespaces) - 1; i >= 0; i-- {
		if n := st.Namespaces[i]; !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// namespaces are those of names that exist.
func (st State) namespaces() []string {
	var out []string
	for _, n := range st.names() {
		if netns.ExistsNamed(n) {
			out = append(out, n)
		}
	}
	return out
}

// podPrefixes are the netns name prefixes of the pods of the lab's nodes
// (each node's agent keeps its state in DIR/nodeN/agent). When the lab's
// state went with its directory (a test process killed, the directory then
// removed by hand), the node count is unknown: every node a lab can have is
// tried. A prefix hashes the lab's directory with the node's name, so no
// other lab's pods share it.
func (st State) podPrefixes() []string {
	n := st.Nodes
	if n == 0 {
		n = MaxNodes
	}
	var out []string
	for i := 1; i <= n; i++ {
		out = append(out, kubelet.SandboxPrefix(nodeName(i), filepath.Join(st.Dir, nodeName(i), "agent")))
	}
	return out
}

// podSandboxes lists the pod namespaces (network, or UTS and mount) of the
// lab's nodes that exist.
func podSandboxes(prefixes []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, dir := range []string{netns.NetNSDir, cni.PodNSDir} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			for _, p := range prefixes {
				if strings.HasPrefix(e.Name(), p) && !seen[e.Name()] {
					seen[e.Name()] = true
					out = append(out, e.Name())
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// processesIn lists the processes whose network namespace is the named one.
func processesIn(ns string) []procID {
	var st syscall.Stat_t
	if syscall.Stat(netns.NetNSPath(ns), &st) != nil {
		return nil
	}
	want := "net:[" + strconv.FormatUint(st.Ino, 10) + "]"
	entries, _ := os.ReadDir("/proc")
	var out []procID
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if ns, err := os.Readlink("/proc/" + e.Name() + "/ns/net"); err == nil && ns == want && proc.Alive(pid) {
			out = append(out, procID{pid, proc.StartTime(pid)})
		}
	}
	return out
}

// kill SIGKILLs the processes (and their process groups) and waits a little
// for them to go.
func kill(procs []procID) {
	for _, p := range procs {
		if p.running() {
			proc.SignalGroup(p.pid, syscall.SIGKILL)
		}
	}
	for _, p := range procs {
		if p.running() {
			waitGone(p.pid, 2*time.Second)
		}
	}
}

func down(st State, binary string, log *slog.Logger) error {
	var errs []error
	prefixes := st.podPrefixes()
	// Everything the lab runs, to check at the end that it is gone.
	procs := map[procID]string{}
	for host, pid := range st.PIDs {
		if pid > 0 && st.owns(host, pid) {
			procs[procID{pid, proc.StartTime(pid)}] = host
		}
	}
	for _, ns := range append(st.namespaces(), podSandboxes(prefixes)...) {
		for _, p := range processesIn(ns) {
			procs[p] = "netns " + ns
		}
	}
	// Stop the node processes (and the forwarder) first so nothing recreates pods.
	for host, pid := range st.PIDs {
		if pid > 0 && st.owns(host, pid) {
			proc.SignalGroup(pid, syscall.SIGTERM)
			if !waitGone(pid, 5*time.Second) {
				proc.SignalGroup(pid, syscall.SIGKILL)
				waitGone(pid, 2*time.Second)
			}
			log.Debug("stopped", "host", host, "pid", pid)
		}
	}
	// Remove each node's pods, bridge and rules from inside its namespace.
	for i := 1; i <= st.Nodes; i++ {
		ns := NS(st.Name, nodeName(i))
		dataDir := filepath.Join(st.Dir, nodeName(i))
		if !netns.ExistsNamed(ns) {
			continue
		}
		if _, err := os.Stat(dataDir); err == nil && binary != "" {
			out, err := exec.Command("nsenter", "--net="+netns.NetNSPath(ns), "--", binary, "down", "--data-dir", dataDir).CombinedOutput()
			if err != nil {
				errs = append(errs, fmt.Errorf("minikit down on %s: %v: %s", ns, err, out))
			}
		}
	}
	// Pods the nodes' own down could not reach (their data dir is gone).
	if left := podSandboxes(prefixes); len(left) > 0 {
		for _, ns := range left {
			kill(processesIn(ns))
			if err := cni.DeletePodNamespaces(ns); err != nil {
				errs = append(errs, err)
			}
			if netns.ExistsNamed(ns) {
				if err := netns.DeleteNamed(ns); err != nil {
					errs = append(errs, err)
				}
			}
		}
		if err := cni.ReleasePodNSDir(); err != nil {
			errs = append(errs, err)
		}
	}
	// Whatever else still runs in the lab's namespaces (a `lab exec` shell).
	for _, ns := range st.namespaces() {
		kill(processesIn(ns))
	}
	for _, ns := range st.namespaces() {
		if err := netns.DeleteNamed(ns); err != nil {
			errs = append(errs, err)
		}
	}
	if st.UserKubeconfig != "" {
		if err := UnmergeKubeconfig(st.UserKubeconfig, st.Name, st.PrevContext, st.UserUID); err != nil {
			errs = append(errs, err)
		}
	}
	if st.Dir != "" {
		if err := os.RemoveAll(st.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	if left := st.leftovers(procs, prefixes); len(left) > 0 {
		errs = append(errs, fmt.Errorf("lab %q is not completely removed; still there:\n  %s", st.Name, strings.Join(left, "\n  ")))
	}
	if len(errs) == 0 {
		// Only a lab that is completely gone leaves the registry, so that
		// `lab down --name` can be run again to finish the job.
		if err := unregister(st.Name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// leftovers lists what of the lab still exists: processes, namespaces, pod
// namespaces, mounts, its directory.
func (st State) leftovers(procs map[procID]string, prefixes []string) []string {
	var left []string
	for p, what := range procs {
		if p.running() {
			cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/cmdline")
			left = append(left, fmt.Sprintf("process %d (%s) of %s", p.pid, strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " ")), what))
		}
	}
	for _, ns := range st.namespaces() {
		left = append(left, "network namespace "+ns)
	}
	for _, ns := range podSandboxes(prefixes) {
		left = append(left, "pod namespace "+ns)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mine := false
		for _, n := range st.names() {
			mine = mine || f[4] == netns.NetNSPath(n)
		}
		for _, p := range prefixes {
			mine = mine || strings.Contains(f[4], "/"+p)
		}
		if mine {
			left = append(left, "mount "+f[4])
		}
	}
	if st.Dir != "" {
		if _, err := os.Stat(st.Dir); err == nil {
			left = append(left, "directory "+st.Dir)
		}
	}
	sort.Strings(left)
	return left
}
