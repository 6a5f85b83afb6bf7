package kubelet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/minikit/minikit/internal/cni"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A pod's volumes, as the kubelet mounts them: each volume is a directory
// under the pod's data directory (emptyDir, configMap, secret, downwardAPI, the
// service account's projected volume) or a directory of the node (hostPath),
// bind-mounted at every mountPath that names it. A pod has one mount namespace
// for all its containers (package cni), so every container sees every
// mount of the pod; containers that mount one volume share its files, as
// dns_common.go's probe pod needs (its queriers write /results, its web
// server serves them). The directories go with the pod.

// volumeRefresh is how often configMap, secret and downwardAPI volumes are
// rewritten from the API, as the kubelet's periodic sync does.
const volumeRefresh = time.Minute

// volumeBinds creates the pod's volume directories and returns their mounts,
// in the order the containers list them.
func (w *podWorker) volumeBinds(pod *corev1.Pod) ([]cni.Bind, error) {
	vols := map[string]*corev1.Volume{}
	for i := range pod.Spec.Volumes {
		vols[pod.Spec.Volumes[i].Name] = &pod.Spec.Volumes[i]
	}
	mounted := map[string]string{} // mountPath -> volume/subPath
	var binds []cni.Bind
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			for _, m := range c.VolumeMounts {
				v := vols[m.Name]
				if v == nil || m.MountPath == "" {
					continue
				}
				target := filepath.Clean(m.MountPath)
				key := m.Name + "/" + m.SubPath
				if prev, ok := mounted[target]; ok {
					if prev != key {
						w.logf("two containers mount different volumes at one path; the pod's containers share one mount namespace, so the first wins",
							"path", target, "volume", m.Name)
					}
					continue
				}
				src, readOnly, err := w.volumeSource(v)
				if err != nil {
					return nil, err
				}
				if m.SubPath != "" {
					src = filepath.Join(src, filepath.Clean("/"+m.SubPath))
					if _, err := os.Stat(src); os.IsNotExist(err) {
						if err := os.MkdirAll(src, 0o777); err != nil {
							return nil, fmt.Errorf("creating subPath %q of volume %q: %w", m.SubPath, m.Name, err)
						}
					}
				}
				mounted[target] = key
				binds = append(binds, cni.Bind{Source: src, Target: target, ReadOnly: readOnly || m.ReadOnly})
			}
		}
	}
	return binds, nil
}

// volumeSource is the node path a volume is, created if it is the pod's own,
// and whether it is always mounted read-only.
func (w *podWorker) volumeSource(v *corev1.Volume) (string, bool, error) {
	dir := w.volumeDir(v.Name)
	switch {
	case v.EmptyDir != nil:
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return "", false, err
		}
		// World-writable, as the kubelet makes an emptyDir.
		return dir, false, os.Chmod(dir, 0o777)
	case v.HostPath != nil:
		p := v.HostPath.Path
		t := corev1.HostPathUnset
		if v.HostPath.Type != nil {
			t = *v.HostPath.Type
		}
		switch t {
		case corev1.HostPathDirectoryOrCreate:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return "", false, fmt.Errorf("creating hostPath %s of volume %q: %w", p, v.Name, err)
			}
		case corev1.HostPathFileOrCreate:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return "", false, err
			}
			f, err := os.OpenFile(p, os.O_RDONLY|os.O_CREATE, 0o644)
			if err != nil {
				return "", false, fmt.Errorf("creating hostPath %s of volume %q: %w", p, v.Name, err)
			}
			f.Close()
		}
		if _, err := os.Stat(p); err != nil {
			return "", false, fmt.Errorf("hostPath %s of volume %q: %w", p, v.Name, err)
		}
		return p, false, nil
	case v.ConfigMap != nil, v.Secret != nil, v.DownwardAPI != nil, v.Projected != nil:
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", false, err
		}
		return dir, true, nil
	}
	return "", false, fmt.Errorf("volume %q: minikit supports emptyDir, hostPath, configMap, secret, downwardAPI and projected service account volumes", v.Name)
}

// ensureVolumeFiles writes the files of the pod's configMap, secret and
// downwardAPI volumes, at the first sync and then every volumeRefresh.
func (w *podWorker) ensureVolumeFiles(ctx context.Context, pod *corev1.Pod) error {
	if time.Now().Before(w.volumesRefreshAt) {
		return nil
	}
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		var files map[string][]byte
		var mode *int32
		var err error
		switch {
		case v.ConfigMap != nil:
			files, err = w.configMapFiles(ctx, pod, v.Name, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.Optional)
			mode = v.ConfigMap.DefaultMode
		case v.Secret != nil:
			files, err = w.secretFiles(ctx, pod, v.Name, v.Secret.SecretName, v.Secret.Items, v.Secret.Optional)
			mode = v.Secret.DefaultMode
		case v.DownwardAPI != nil:
			files = downwardAPIFiles(pod, v.DownwardAPI.Items)
			mode = v.DownwardAPI.DefaultMode
		default:
			continue
		}
		if err != nil {
			return err
		}
		perm := os.FileMode(0o644)
		if mode != nil {
			perm = os.FileMode(*mode) & os.ModePerm
		}
		dir := w.volumeDir(v.Name)
		for name, data := range files {
			p := filepath.Join(dir, filepath.Clean("/"+name))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			if err := writeAtomic(p, data, perm); err != nil {
				return err
			}
		}
		if err := volumeOwnership(dir, fsGroupOf(pod), true); err != nil {
			return err
		}
	}
	w.volumesRefreshAt = time.Now().Add(volumeRefresh)
	return nil
}

// pick selects items (key -> path) of data, or every key under its own name.
func pick(data map[string][]byte, items []corev1.KeyToPath) map[string][]byte {
	if len(items) == 0 {
		return data
	}
	out := map[string][]byte{}
	for _, it := range items {
		if d, ok := data[it.Key]; ok {
			out[it.Path] = d
		}
	}
	return out
}

func (w *podWorker) configMapFiles(ctx context.Context, pod *corev1.Pod, vol, name string, items []corev1.KeyToPath, optional *bool) (map[string][]byte, error) {
	cm, err := w.a.client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && optional != nil && *optional {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading configmap %s/%s for volume %q: %w", pod.Namespace, name, vol, err)
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return pick(data, items), nil
}

func (w *podWorker) secretFiles(ctx context.Context, pod *corev1.Pod, vol, name string, items []corev1.KeyToPath, optional *bool) (map[string][]byte, error) {
	s, err := w.a.client.CoreV1().Secrets(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && optional != nil && *optional {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading secret %s/%s for volume %q: %w", pod.Namespace, name, vol, err)
	}
	data := map[string][]byte{}
	for k, v := range s.Data {
		data[k] = v
	}
	for k, v := range s.StringData {
		data[k] = []byte(v)
	}
	return pick(data, items), nil
}

// downwardAPIFiles renders the metadata fields a downwardAPI volume names
// (labels and annotations as key="value" lines, as the kubelet writes them).
func downwardAPIFiles(pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile) map[string][]byte {
	out := map[string][]byte{}
	for _, it := range items {
		if it.FieldRef == nil {
			continue
		}
		var v string
		switch it.FieldRef.FieldPath {
		case "metadata.name":
			v = pod.Name
		case "metadata.namespace":
			v = pod.Namespace
		case "metadata.uid":
			v = string(pod.UID)
		case "metadata.labels":
			v = formatMap(pod.Labels)
		case "metadata.annotations":
			v = formatMap(pod.Annotations)
		default:
			continue
		}
		out[it.Path] = []byte(v)
	}
	return out
}

func formatMap(m map[string]string) string {
	lines := make([]string, 0, len(m))
	for k, v := range m {
		lines = append(lines, fmt.Sprintf("%s=%q", k, v))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}
