package kubelet

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Local ephemeral storage eviction, as the kubelet's eviction manager does it
// for storage limits (pkg/kubelet/eviction: localStorageEviction and its
// emptyDir, pod and container checks). Every evictionMonitoringPeriod a
// running pod's use of the node's disk is measured as the kubelet's summary
// counts it: each container's writable layer and log, the pod's local
// ephemeral volumes (emptyDir on the node's disk, configMap) and its
// /etc/hosts. A pod over an emptyDir's sizeLimit, over the sum of its
// containers' ephemeral-storage limits, or with a container over its own
// limit is killed (grace period 1s) and Failed with reason Evicted and
// upstream's message. Its endpoints go, as a Failed pod's do. Upstream sets
// no DisruptionTarget condition for these evictions (only for node pressure),
// so none is set here either.
//
// A minikit container has no image file system: it runs host programs on the
// node's. Its writable layer is its working directory, a directory of its
// own under the pod's (containerDir), fresh for every start as a new
// container's layer is; what it writes by relative path lands there and is
// counted, what it writes elsewhere on the node is not (as a hostPath's is
// not).

// evictionMonitoringPeriod is how often a pod's storage is checked, the
// kubelet's housekeeping period (evictionMonitoringPeriod in kubelet.go).
const evictionMonitoringPeriod = 10 * time.Second

// evictionGracePeriod is immediateEvictionGracePeriodSeconds: an evicted
// pod's containers get SIGTERM, then SIGKILL a second later.
const evictionGracePeriod = time.Second

// The eviction manager's reason and messages (pkg/kubelet/eviction/helpers.go).
const (
	evictedReason                       = "Evicted"
	containerEphemeralStorageMessageFmt = "Container %s exceeded its local ephemeral storage limit %q. "
	podEphemeralStorageMessageFmt       = "Pod ephemeral local storage usage exceeds the total limit of containers %s. "
	emptyDirMessageFmt                  = "Usage of EmptyDir volume %q exceeds the limit %q. "
)

// storageUsage is a pod's use of the node's disk in bytes, as the kubelet's
// stats summary reports it (PodStats): per container its writable layer
// (Rootfs) plus its log (Logs), per local ephemeral volume its directory
// (VolumeStats), and the pod's /etc/hosts.
type storageUsage struct {
	containers map[string]int64
	volumes    map[string]int64
	hosts      int64
}

// total is the pod's EphemeralStorage.UsedBytes: everything above.
func (u storageUsage) total() int64 {
	n := u.hosts
	for _, b := range u.containers {
		n += b
	}
	for _, b := range u.volumes {
		n += b
	}
	return n
}

// localEphemeralVolume is volume util's IsLocalEphemeralVolume: the volumes
// on the node's disk that count against the pod's ephemeral storage (secret,
// downwardAPI and projected volumes are tmpfs in a kubelet, memory).
func localEphemeralVolume(v corev1.Volume) bool {
	return v.GitRepo != nil || v.ConfigMap != nil ||
		(v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumDefault)
}

// storageEviction decides, as localStorageEviction does for one pod, whether
// usage gets the pod evicted and with which message. The checks go in
// upstream's order: emptyDir size limits, then the pod's total against the
// sum of its containers' limits, then each container against its own.
func storageEviction(pod *corev1.Pod, u storageUsage) (string, bool) {
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir == nil || v.EmptyDir.Medium == corev1.StorageMediumMemory {
			// A memory-backed emptyDir is tmpfs, whose size the kernel limits.
			continue
		}
		size := v.EmptyDir.SizeLimit
		used, ok := u.volumes[v.Name]
		if ok && size != nil && size.Sign() == 1 && resource.NewQuantity(used, resource.BinarySI).Cmp(*size) > 0 {
			return fmt.Sprintf(emptyDirMessageFmt, v.Name, size.String()), true
		}
	}
	if limit, ok := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})[corev1.ResourceEphemeralStorage]; ok {
		if resource.NewQuantity(u.total(), resource.BinarySI).Cmp(limit) > 0 {
			return fmt.Sprintf(podEphemeralStorageMessageFmt, limit.String()), true
		}
	}
	limits := map[string]*resource.Quantity{}
	for _, c := range pod.Spec.Containers {
		if l := c.Resources.Limits.StorageEphemeral(); l.Value() != 0 {
			limits[c.Name] = l
		}
	}
	for _, c := range pod.Spec.InitContainers {
		if l := c.Resources.Limits.StorageEphemeral(); isSidecar(c) && l.Value() != 0 {
			limits[c.Name] = l
		}
	}
	// In the order of the pod's containers, so one message is stable.
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		limit, ok := limits[c.Name]
		used, measured := u.containers[c.Name]
		if ok && measured && limit.Cmp(*resource.NewQuantity(used, resource.BinarySI)) < 0 {
			return fmt.Sprintf(containerEphemeralStorageMessageFmt, c.Name, limit.String()), true
		}
	}
	return "", false
}

// storageLimited says whether the pod has a storage limit storageEviction
// checks: an ephemeral-storage limit or an emptyDir sizeLimit.
func storageLimited(pod *corev1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil && v.EmptyDir.SizeLimit.Sign() == 1 {
			return true
		}
	}
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		if !c.Resources.Limits.StorageEphemeral().IsZero() {
			return true
		}
	}
	return false
}

// containerDir is a container's writable layer: its working directory.
func (w *podWorker) containerDir(name string) string {
	return filepath.Join(w.dir(), "containers", name)
}

// freshContainerDir empties a container's writable layer before it starts,
// as a new container gets a new layer.
func (w *podWorker) freshContainerDir(name string) (string, error) {
	dir := w.containerDir(name)
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("removing writable layer of container %q: %w", name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating writable layer of container %q: %w", name, err)
	}
	return dir, nil
}

// measureStorage is the pod's storageUsage, read from its directories.
// Containers that never started here have no layer and are left out, as
// they have no stats upstream.
func (w *podWorker) measureStorage(pod *corev1.Pod) storageUsage {
	u := storageUsage{containers: map[string]int64{}, volumes: map[string]int64{}}
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		layer, err := diskUsage(w.containerDir(c.Name))
		if err != nil {
			continue
		}
		logs, _ := diskUsage(w.logPath(c.Name))
		u.containers[c.Name] = layer + logs
	}
	for _, v := range pod.Spec.Volumes {
		if !localEphemeralVolume(v) {
			continue
		}
		if n, err := diskUsage(w.volumeDir(v.Name)); err == nil {
			u.volumes[v.Name] = n
		}
	}
	u.hosts, _ = diskUsage(w.hostsPath())
	return u
}

// diskUsage is what du counts for path: the blocks allocated to it and to
// everything under it, a file with several links once, without following
// symbolic links. Files that go while it walks are skipped.
func diskUsage(path string) (int64, error) {
	var total int64
	seen := map[[2]uint64]bool{}
	err := filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == path {
				return err
			}
			return nil
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return nil
		}
		if st.Nlink > 1 {
			key := [2]uint64{uint64(st.Dev), st.Ino}
			if seen[key] {
				return nil
			}
			seen[key] = true
		}
		total += st.Blocks * 512
		return nil
	})
	return total, err
}

// checkStorage measures a running pod at most once per
// evictionMonitoringPeriod and evicts it when it is over a limit. It returns
// true when the pod was evicted.
func (w *podWorker) checkStorage(pod *corev1.Pod) bool {
	if !storageLimited(pod) {
		// Nothing it uses could get it evicted: no walk of its files.
		return false
	}
	now := w.a.clock.Now()
	if !w.storageCheckedAt.IsZero() && now.Sub(w.storageCheckedAt) < evictionMonitoringPeriod {
		return false
	}
	w.storageCheckedAt = now
	msg, evict := storageEviction(pod, w.measureStorage(pod))
	if !evict {
		return false
	}
	w.evict(msg)
	return true
}

// evict kills the pod's containers (SIGTERM, SIGKILL after the eviction
// grace period) and records why: from now on the pod is Failed with reason
// Evicted, and nothing of it is started again.
func (w *podWorker) evict(msg string) {
	w.logf("evicting pod", "message", msg)
	w.state.Evicted = msg
	w.saveState()
	w.terminate(evictionGracePeriod)
}

// execArgv wraps a command run in the container (an exec probe) to run in
// the pod's namespaces and the container's working directory, as a
// runtime's exec does.
func (c *container) execArgv(argv []string) []string {
	out := c.w.execArgv(argv)
	if layer := c.w.containerDir(c.name); dirExists(layer) {
		out = inWorkDir(out, layer)
	}
	return out
}

func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
