package kubelet

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const mi = 1 << 20

// storagePod is a pod whose containers have the given ephemeral-storage
// limits ("" for none), with an emptyDir "cache" of sizeLimit (none when "").
func storagePod(sizeLimit string, limits ...string) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"}}
	for i, l := range limits {
		c := corev1.Container{Name: fmt.Sprintf("c%d", i), Image: "busybox"}
		if l != "" {
			c.Resources.Limits = corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse(l)}
		}
		pod.Spec.Containers = append(pod.Spec.Containers, c)
	}
	v := corev1.Volume{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	if sizeLimit != "" {
		q := resource.MustParse(sizeLimit)
		v.EmptyDir.SizeLimit = &q
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, v)
	return pod
}

// The eviction manager's decisions for local storage limits, in upstream's
// order (emptyDir, then the pod's total, then each container) and with its
// messages.
func TestStorageEviction(t *testing.T) {
	memoryDir := storagePod("1Mi", "")
	memoryDir.Spec.Volumes[0].EmptyDir.Medium = corev1.StorageMediumMemory
	sidecar := storagePod("", "")
	always := corev1.ContainerRestartPolicyAlways
	sidecar.Spec.InitContainers = []corev1.Container{{Name: "side", Image: "busybox", RestartPolicy: &always,
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("1Mi")}}}}
	for _, tt := range []struct {
		name  string
		pod   *corev1.Pod
		usage storageUsage
		want  string // "" keeps the pod
	}{
		{name: "no limits", pod: storagePod("", ""),
			usage: storageUsage{containers: map[string]int64{"c0": 100 * mi}, volumes: map[string]int64{"cache": 100 * mi}}},
		{name: "under the container's limit", pod: storagePod("", "5Mi"),
			usage: storageUsage{containers: map[string]int64{"c0": 4 * mi}, hosts: 4096}},
		{name: "exactly at the limit", pod: storagePod("", "5Mi"),
			usage: storageUsage{containers: map[string]int64{"c0": 5 * mi}}},
		{name: "one container over its limit is the pod over its total first", pod: storagePod("", "5Mi"),
			usage: storageUsage{containers: map[string]int64{"c0": 10 * mi}},
			want:  "Pod ephemeral local storage usage exceeds the total limit of containers 5Mi. "},
		{name: "the total counts volumes and /etc/hosts", pod: storagePod("", "5Mi"),
			usage: storageUsage{containers: map[string]int64{"c0": 4 * mi}, volumes: map[string]int64{"cache": mi}, hosts: 4096},
			want:  "Pod ephemeral local storage usage exceeds the total limit of containers 5Mi. "},
		{name: "the pod's total is the sum of its containers' limits", pod: storagePod("", "5Mi", "5Mi"),
			usage: storageUsage{containers: map[string]int64{"c0": 4 * mi, "c1": 4 * mi}}},
		{name: "a container over its own limit in a pod under its total", pod: storagePod("", "5Mi", "5Mi"),
			usage: storageUsage{containers: map[string]int64{"c0": 6 * mi, "c1": mi}},
			want:  `Container c0 exceeded its local ephemeral storage limit "5Mi". `},
		{name: "a container without a limit leaves the total alone", pod: storagePod("", "", "5Mi"),
			usage: storageUsage{containers: map[string]int64{"c0": 50 * mi, "c1": mi}},
			want:  "Pod ephemeral local storage usage exceeds the total limit of containers 5Mi. "},
		{name: "emptyDir over its sizeLimit", pod: storagePod("1Mi", "5Mi"),
			usage: storageUsage{containers: map[string]int64{"c0": 10 * mi}, volumes: map[string]int64{"cache": 2 * mi}},
			want:  `Usage of EmptyDir volume "cache" exceeds the limit "1Mi". `},
		{name: "emptyDir under its sizeLimit", pod: storagePod("1Mi", ""),
			usage: storageUsage{volumes: map[string]int64{"cache": mi}}},
		{name: "a memory emptyDir is the kernel's to limit", pod: memoryDir,
			usage: storageUsage{volumes: map[string]int64{"cache": 2 * mi}}},
		{name: "a sidecar's limit counts", pod: sidecar,
			usage: storageUsage{containers: map[string]int64{"side": 2 * mi}},
			want:  "Pod ephemeral local storage usage exceeds the total limit of containers 1Mi. "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			msg, evict := storageEviction(tt.pod, tt.usage)
			if evict != (tt.want != "") || msg != tt.want {
				t.Errorf("storageEviction = %q, %v; want %q", msg, evict, tt.want)
			}
		})
	}
}

// diskUsage counts what du counts: allocated blocks, a hard-linked file
// once, not what a symbolic link points to.
func TestDiskUsage(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	write := func(p string, n int) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(strings.Repeat("x", n)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	base, err := diskUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(dir, "a", "big"), 2*mi)
	if err := os.Link(filepath.Join(dir, "a", "big"), filepath.Join(dir, "big-again")); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(outside, "elsewhere"), 4*mi)
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	// A sparse file holds no blocks for its hole.
	f, err := os.Create(filepath.Join(dir, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(8 * mi); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got, err := diskUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The file's 2Mi plus a little for the new directory and the link.
	if used := got - base; used < 2*mi || used > 2*mi+64*1024 {
		t.Errorf("diskUsage = %d more than the empty directory, want 2Mi and a few blocks", used)
	}
	if _, err := diskUsage(filepath.Join(dir, "missing")); err == nil {
		t.Error("diskUsage of a missing path: no error")
	}
}

// A container runs in its own writable directory (its layer), fresh at each
// start; what it writes there and to its log counts as its use.
func TestContainerWritableLayer(t *testing.T) {
	n := newFakeNode(t)
	a := n.start()
	pod := n.createPod(testPod("layer", "1a1b2c3d-0000-4000-8000-000000000031"))
	n.waitPod(pod, "pod running", running)
	w := a.worker(pod.UID)
	layer := w.containerDir("app")
	procs := n.procs.started()
	if len(procs) != 1 || !slices.Contains(procs[0].argv, "--wd="+layer) {
		t.Fatalf("started %+v, want one process in --wd=%s", procs, layer)
	}
	// Exec probes run there too.
	if argv := a.liveContainer(pod.UID, "app").execArgv([]string{"true"}); !slices.Contains(argv, "--wd="+layer) {
		t.Errorf("an exec probe runs %q, not in --wd=%s", argv, layer)
	}
	if err := os.WriteFile(filepath.Join(layer, "file"), make([]byte, mi), 0o644); err != nil {
		t.Fatal(err)
	}
	u := w.measureStorage(pod)
	if u.containers["app"] < mi {
		t.Errorf("the container's use is %d, want at least the 1Mi file in its layer", u.containers["app"])
	}
	// A restart starts from an empty layer.
	n.procs.exitProc(procs[0].pid, 1)
	n.stepUntil("container restarted", func() error {
		if len(n.procs.started()) < 2 {
			return fmt.Errorf("not restarted")
		}
		return nil
	})
	if _, err := os.Stat(filepath.Join(layer, "file")); !os.IsNotExist(err) {
		t.Errorf("the restarted container's layer still has the old file (stat: %v)", err)
	}
}

// A pod over its ephemeral-storage limit is evicted at the next
// housekeeping: its containers are killed and not restarted, and it is
// Failed with reason Evicted and the eviction manager's message. A pod under
// its limit keeps running.
func TestEphemeralStorageEviction(t *testing.T) {
	n := newFakeNode(t)
	a := n.start()
	limited := func(name, uid string) *corev1.Pod {
		p := testPod(name, uid)
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("5Mi")}
		return n.createPod(p)
	}
	hog := limited("hog", "1a1b2c3d-0000-4000-8000-000000000041")
	quiet := limited("quiet", "1a1b2c3d-0000-4000-8000-000000000042")
	n.waitPod(hog, "hog running", running)
	n.waitPod(quiet, "quiet running", running)
	write := func(pod *corev1.Pod, size int) {
		t.Helper()
		p := filepath.Join(a.worker(pod.UID).containerDir("app"), "file")
		if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(hog, 10*mi)
	write(quiet, 2*mi)
	var evicted *corev1.Pod
	n.stepUntil("hog evicted", func() error {
		p, err := n.getPod(hog)
		if err != nil {
			return err
		}
		evicted = p
		if p.Status.Phase != corev1.PodFailed || p.Status.Reason != "Evicted" {
			return fmt.Errorf("phase %q, reason %q", p.Status.Phase, p.Status.Reason)
		}
		return nil
	})
	if want := "Pod ephemeral local storage usage exceeds the total limit of containers 5Mi. "; evicted.Status.Message != want {
		t.Errorf("message %q, want %q", evicted.Status.Message, want)
	}
	for _, c := range evicted.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status != corev1.ConditionFalse {
			t.Errorf("the evicted pod is still Ready")
		}
		if c.Type == corev1.DisruptionTarget {
			t.Errorf("condition %s set; the eviction manager sets none for storage limits", c.Type)
		}
	}
	// Killed, and never started again whatever the restart policy, across
	// more housekeeping.
	for range 15 {
		n.clock.Step(time.Second)
	}
	hogProcs, quietAlive := 0, false
	for _, p := range n.procs.started() {
		if strings.Contains(strings.Join(p.argv, " "), string(hog.UID)) {
			hogProcs++
			if p.alive {
				t.Errorf("the evicted pod's process %d still runs", p.pid)
			}
		} else if p.alive {
			quietAlive = true
		}
	}
	if hogProcs != 1 {
		t.Errorf("the evicted pod's container was started %d times, want once", hogProcs)
	}
	if !quietAlive {
		t.Error("the pod under its limit no longer runs")
	}
	if p := n.waitPod(quiet, "quiet running", running); p.Status.Reason != "" {
		t.Errorf("the pod under its limit has reason %q", p.Status.Reason)
	}
	// The eviction survives an agent restart.
	n.stop()
	n.start()
	for range 12 {
		n.clock.Step(time.Second)
	}
	if p := n.waitPod(hog, "still evicted", func(p *corev1.Pod) error {
		if p.Status.Phase != corev1.PodFailed || p.Status.Reason != "Evicted" {
			return fmt.Errorf("phase %q, reason %q", p.Status.Phase, p.Status.Reason)
		}
		return nil
	}); p.Status.Message != evicted.Status.Message {
		t.Errorf("after an agent restart the message is %q", p.Status.Message)
	}
}

// An emptyDir over its sizeLimit gets its pod evicted with upstream's
// emptyDir message.
func TestEmptyDirSizeLimitEviction(t *testing.T) {
	n := newFakeNode(t)
	a := n.start()
	p := testPod("cache", "1a1b2c3d-0000-4000-8000-000000000051")
	q := resource.MustParse("1Mi")
	p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &q}}}}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	pod := n.createPod(p)
	n.waitPod(pod, "pod running", running)
	if err := os.WriteFile(filepath.Join(a.worker(pod.UID).volumeDir("scratch"), "f"), make([]byte, 2*mi), 0o644); err != nil {
		t.Fatal(err)
	}
	n.stepUntil("pod evicted", func() error {
		p, err := n.getPod(pod)
		if err != nil {
			return err
		}
		if want := `Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". `; p.Status.Reason != "Evicted" || p.Status.Message != want {
			return fmt.Errorf("phase %q, reason %q, message %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
		}
		return nil
	})
}

// worker is the agent's worker of a pod (its immutable fields are safe to read).
func (a *Agent) worker(uid types.UID) *podWorker {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.workers[uid]
}
