package kubelet

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/minikit/minikit/internal/proc"

	"github.com/minikit/minikit/internal/cni"
	"github.com/minikit/minikit/internal/iptables"
	"github.com/minikit/minikit/internal/netns"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// Down removes from the kernel every pod sandbox the agent with this data dir
// created: it kills the containers' processes, unmounts the pod namespaces and
// deletes the netns and veths, the routes to other nodes and the VXLAN device
// flannel.1 (vxlan pod network), and when removeBridge is set the cni0 bridge and
// the sysctls it changed (back to their recorded values). It
// works from the agent's persisted state alone, so it also cleans up after a crash.
// It must run in the node's network namespace.
func Down(dataDir string, log *slog.Logger, removeBridge bool) error {
	if log == nil {
		log = slog.Default()
	}
	podsDir := filepath.Join(dataDir, "pods")
	entries, err := os.ReadDir(podsDir)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	n := &cni.Network{Bridge: "cni0", Log: log, SysctlRecord: sysctlRecord(dataDir)}
	a := &Agent{cfg: Config{DataDir: dataDir}, log: log, procs: hostProcesses{}, prober: netProber{}}
	a.setClock(clock.RealClock{})
	var firstErr error
	for _, e := range entries {
		w := newPodWorker(a, "", "", types.UID(e.Name()))
		w.loadState()
		if w.state == nil {
			os.RemoveAll(filepath.Join(podsDir, e.Name()))
			continue
		}
		for _, cs := range w.state.Containers {
			if cs.PID > 0 && cs.ProcStart != 0 && proc.StartTime(cs.PID) == cs.ProcStart {
				proc.SignalGroup(cs.PID, syscall.SIGKILL)
				for i := 0; i < 50 && proc.StartTime(cs.PID) == cs.ProcStart; i++ {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}
		killInPod(w.state.NetNS, nil)
		if err := cni.DeletePodNamespaces(w.state.NetNS); err != nil && firstErr == nil {
			firstErr = err
		}
		if !w.state.HostNetwork {
			if err := n.TeardownPod(w.state.NetNS); err != nil && firstErr == nil {
				firstErr = err
			}
		}
		os.RemoveAll(filepath.Join(podsDir, e.Name()))
		log.Info("removed pod sandbox", "pod", w.state.Namespace+"/"+w.state.Name, "netns", w.state.NetNS)
	}
	os.Remove(filepath.Join(dataDir, "ipam.json"))
	if err := cni.ReleasePodNSDir(); err != nil && firstErr == nil {
		firstErr = err
	}
	if _, err := os.Stat(cni.PodNSDir); os.IsNotExist(err) {
		// No pod of any agent remains: the token mount point can go.
		removeTokenMountPoint()
	}
	if _, err := n.SyncRoutes(nil); err != nil && firstErr == nil {
		firstErr = err
	}
	// The vxlan pod network's device, with its neighbours and FDB entries.
	if _, err := n.DeleteVXLAN(); err != nil && firstErr == nil {
		firstErr = err
	}
	// Both families: an IPv6-only node wrote its masquerade and hostPort
	// rules to ip6tables.
	for _, newIPT := range []func() (iptables.Interface, error){iptables.New, iptables.NewIPv6} {
		ipt, err := newIPT()
		if err != nil {
			continue
		}
		ipt.DeleteRule(iptables.TableNAT, "POSTROUTING", "-m", "comment", "--comment", "minikit pod masquerade", "-j", masqChain)
		if err := ipt.DeleteChain(iptables.TableNAT, masqChain); err != nil && firstErr == nil {
			firstErr = err
		}
		if err := removeHostPorts(ipt); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if removeBridge {
		if err := n.DeleteBridge(); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("deleting cni0: %w", err)
		}
		// The node's sysctls go back to what they were before minikit set them.
		if err := n.RestoreSysctls(); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// sysctlRecord is where the agent records the sysctls it changed, with their
// previous values, for Down to restore.
func sysctlRecord(dataDir string) string { return filepath.Join(dataDir, "sysctl.json") }

// sweepOrphans kills, once per worker, the processes in the pod's namespaces that
// a previous agent started but did not live to record: an agent killed between
// starting a container and saving the pod's state leaves a process that no
// state names, which would hold the container's ports while its replacement
// crash-loops, and outlive minikit down. An orphan is a process-group leader
// (containers run in their own group) whose parent is gone (PPID 1) and which
// no adopted container is. Processes with a living parent (minikit exec
// sessions, probes) are left alone.
func (w *podWorker) sweepOrphans() {
	if w.state == nil {
		return
	}
	known := map[int]bool{}
	for _, c := range w.containers {
		c.mu.Lock()
		if c.running {
			known[c.pid] = true
		}
		c.mu.Unlock()
	}
	killed := killInPod(w.state.NetNS, func(pid, pgid, ppid int) bool {
		return pgid != pid || ppid != 1 || known[pid]
	})
	for _, pid := range killed {
		w.logf("killed a container process no state recorded", "pid", pid)
	}
}

// killInPod SIGKILLs the process group of every process in the named pod's
// network namespace or mount namespace (a hostNetwork pod has only the
// latter: its processes share the node's network namespace, where only the
// mount namespace tells them apart), except those keep returns true for, and
// returns their PIDs. A namespace's inode identifies it while it is mounted.
func killInPod(name string, keep func(pid, pgid, ppid int) bool) []int {
	var want []string
	for _, f := range []struct{ path, kind string }{{netns.NetNSPath(name), "net"}, {cni.PodMntPath(name), "mnt"}} {
		var st syscall.Stat_t
		if syscall.Stat(f.path, &st) == nil && netns.IsNamespaceFile(f.path) {
			want = append(want, f.kind+":["+strconv.FormatUint(st.Ino, 10)+"]")
		}
	}
	if len(want) == 0 {
		return nil
	}
	entries, _ := os.ReadDir("/proc")
	var killed []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		inPod := false
		for _, w := range want {
			kind, _, _ := strings.Cut(w, ":")
			if ns, err := os.Readlink("/proc/" + e.Name() + "/ns/" + kind); err == nil && ns == w {
				inPod = true
			}
		}
		if !inPod {
			continue
		}
		f := proc.Stat(pid)
		if len(f) < 4 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		pgid, _ := strconv.Atoi(f[2])
		if keep != nil && keep(pid, pgid, ppid) {
			continue
		}
		if pgid == pid {
			syscall.Kill(-pid, syscall.SIGKILL)
		}
		syscall.Kill(pid, syscall.SIGKILL)
		killed = append(killed, pid)
	}
	return killed
}
