package node

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/minikit/minikit/iptables"
	"github.com/minikit/minikit/sandbox"

	"k8s.io/apimachinery/pkg/types"
)

// Down removes from the kernel every pod sandbox the agent with this data dir
// created: it kills the containers' processes, unmounts the pod namespaces and
// deletes the netns and veths, and the cni0 bridge when removeBridge is set. It
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
	a := &Agent{cfg: Config{DataDir: dataDir}, log: log, net: &sandbox.Node{Bridge: "cni0", Log: log}}
	var firstErr error
	for _, e := range entries {
		w := newPodWorker(a, "", "", types.UID(e.Name()))
		w.loadState()
		if w.state == nil {
			os.RemoveAll(filepath.Join(podsDir, e.Name()))
			continue
		}
		for _, cs := range w.state.Containers {
			if cs.PID > 0 && cs.ProcStart != 0 && procStartTime(cs.PID) == cs.ProcStart {
				syscall.Kill(-cs.PID, syscall.SIGKILL)
				syscall.Kill(cs.PID, syscall.SIGKILL)
				for i := 0; i < 50 && procStartTime(cs.PID) == cs.ProcStart; i++ {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}
		if err := sandbox.DeletePodNamespaces(w.state.NetNS); err != nil && firstErr == nil {
			firstErr = err
		}
		if err := a.net.TeardownPod(w.state.NetNS); err != nil && firstErr == nil {
			firstErr = err
		}
		os.RemoveAll(filepath.Join(podsDir, e.Name()))
		log.Info("removed pod sandbox", "pod", w.state.Namespace+"/"+w.state.Name, "netns", w.state.NetNS)
	}
	os.Remove(filepath.Join(dataDir, "ipam.json"))
	if err := sandbox.ReleasePodNSDir(); err != nil && firstErr == nil {
		firstErr = err
	}
	if _, err := a.net.SyncRoutes(nil); err != nil && firstErr == nil {
		firstErr = err
	}
	if ipt, err := iptables.New(); err == nil {
		ipt.DeleteRule(iptables.TableNAT, "POSTROUTING", "-m", "comment", "--comment", "minikit pod masquerade", "-j", masqChain)
		if err := ipt.DeleteChain(iptables.TableNAT, masqChain); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if removeBridge {
		if err := a.net.DeleteBridge(); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("deleting cni0: %w", err)
		}
	}
	return firstErr
}
