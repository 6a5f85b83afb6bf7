package kubelet

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/minikit/minikit/internal/fsutil"

	"github.com/minikit/minikit/internal/cni"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A pod's service account volume, as the kubelet materialises the projected
// volume kube-api-access-XXXXX: a directory per pod with the files token (a
// TokenRequest bound to the pod, fetched with the node's credentials and
// refreshed at 80% of its lifetime, as the kubelet's token manager does),
// ca.crt (from the namespace's kube-root-ca.crt) and namespace, bind-mounted
// read-only at the volume's mount path in the pod's mount namespace. Files
// are replaced by rename, so a reader never sees half a token.

// tokenState is when the pod's token must be fetched again.
type tokenState struct {
	refreshAt time.Time
}

// projectedVolume is the pod's projected volume with a service account token
// source, and the path a container mounts it at.
func projectedVolume(pod *corev1.Pod) (*corev1.Volume, string) {
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if v.Projected == nil {
			continue
		}
		hasToken := false
		for _, src := range v.Projected.Sources {
			hasToken = hasToken || src.ServiceAccountToken != nil
		}
		if !hasToken {
			continue
		}
		for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
			for _, c := range cs {
				for _, m := range c.VolumeMounts {
					if m.Name == v.Name && m.MountPath != "" {
						return v, m.MountPath
					}
				}
			}
		}
	}
	return nil, ""
}

func (w *podWorker) volumeDir(name string) string { return filepath.Join(w.dir(), "volumes", name) }

// ensureServiceAccountFiles writes the projected volume's files, fetching a
// new token when none is held or the held one is due for refresh.
func (w *podWorker) ensureServiceAccountFiles(ctx context.Context, pod *corev1.Pod) error {
	v, _ := projectedVolume(pod)
	if v == nil {
		return nil
	}
	dir := w.volumeDir(v.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	mode := os.FileMode(0o644)
	if v.Projected.DefaultMode != nil {
		mode = os.FileMode(*v.Projected.DefaultMode)
	}
	refresh := time.Now().After(w.token.refreshAt)
	for _, src := range v.Projected.Sources {
		switch {
		case src.ServiceAccountToken != nil:
			p := filepath.Join(dir, src.ServiceAccountToken.Path)
			if _, err := os.Stat(p); err == nil && !refresh {
				continue
			}
			tok, next, err := w.requestToken(ctx, pod, src.ServiceAccountToken)
			if err != nil {
				return err
			}
			if err := writeAtomic(p, []byte(tok), mode); err != nil {
				return err
			}
			w.token.refreshAt = next
		case src.ConfigMap != nil:
			if !refresh && filesExist(dir, src.ConfigMap.Items) {
				continue
			}
			cm, err := w.a.client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, src.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				if src.ConfigMap.Optional != nil && *src.ConfigMap.Optional {
					continue
				}
				return fmt.Errorf("reading configmap %s/%s for volume %q: %w", pod.Namespace, src.ConfigMap.Name, v.Name, err)
			}
			for _, it := range src.ConfigMap.Items {
				if err := writeAtomic(filepath.Join(dir, it.Path), []byte(cm.Data[it.Key]), mode); err != nil {
					return err
				}
			}
		case src.DownwardAPI != nil:
			for _, it := range src.DownwardAPI.Items {
				if it.FieldRef == nil {
					continue
				}
				val := map[string]string{"metadata.namespace": pod.Namespace, "metadata.name": pod.Name,
					"metadata.uid": string(pod.UID), "spec.serviceAccountName": pod.Spec.ServiceAccountName,
					"spec.nodeName": pod.Spec.NodeName}[it.FieldRef.FieldPath]
				if err := writeAtomic(filepath.Join(dir, it.Path), []byte(val), mode); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// requestToken fetches a token bound to pod and returns when to refresh it:
// at 80% of its lifetime, or after 24 hours, as the kubelet does.
func (w *podWorker) requestToken(ctx context.Context, pod *corev1.Pod, p *corev1.ServiceAccountTokenProjection) (string, time.Time, error) {
	exp := int64(3600)
	if p.ExpirationSeconds != nil {
		exp = *p.ExpirationSeconds
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &exp,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if p.Audience != "" {
		tr.Spec.Audiences = []string{p.Audience}
	}
	issued := time.Now()
	got, err := w.a.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName, tr, metav1.CreateOptions{})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("requesting token of service account %s/%s for pod %q: %w", pod.Namespace, pod.Spec.ServiceAccountName, pod.Name, err)
	}
	ttl := got.Status.ExpirationTimestamp.Sub(issued)
	return got.Status.Token, issued.Add(min(ttl*8/10, 24*time.Hour)), nil
}

func filesExist(dir string, items []corev1.KeyToPath) bool {
	for _, it := range items {
		if _, err := os.Stat(filepath.Join(dir, it.Path)); err != nil {
			return false
		}
	}
	return true
}

// writeAtomic replaces path durably (fsutil.WriteFileAtomic), unless it
// already holds data: a projected volume's files change only when their
// content does.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	if old, err := os.ReadFile(path); err == nil && string(old) == string(data) {
		return nil
	}
	return fsutil.WriteFileAtomic(path, data, mode)
}

// apiServiceEnv is the environment every container gets for the kubernetes
// Service, as the kubelet writes it whatever enableServiceLinks says:
// KUBERNETES_SERVICE_HOST/PORT(_HTTPS) and the docker-link KUBERNETES_PORT*.
// The Service's cluster IP is read once from the API and kept.
func (a *Agent) apiServiceEnv(ctx context.Context) []string {
	a.apiEnvMu.Lock()
	defer a.apiEnvMu.Unlock()
	if a.apiEnv != nil {
		return a.apiEnv
	}
	svc, err := a.client.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil || svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone || len(svc.Spec.Ports) == 0 {
		return nil
	}
	a.apiEnv = serviceEnv("kubernetes", svc)
	return a.apiEnv
}

// serviceEnv is the kubelet's environment for one Service.
func serviceEnv(name string, svc *corev1.Service) []string {
	prefix := strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	host := svc.Spec.ClusterIP
	first := svc.Spec.Ports[0]
	env := []string{
		prefix + "_SERVICE_HOST=" + host,
		prefix + "_SERVICE_PORT=" + strconv.Itoa(int(first.Port)),
	}
	for _, p := range svc.Spec.Ports {
		if p.Name != "" {
			env = append(env, prefix+"_SERVICE_PORT_"+strings.ToUpper(strings.ReplaceAll(p.Name, "-", "_"))+"="+strconv.Itoa(int(p.Port)))
		}
	}
	proto := strings.ToLower(string(first.Protocol))
	if proto == "" {
		proto = "tcp"
	}
	env = append(env, prefix+"_PORT="+proto+"://"+net.JoinHostPort(host, strconv.Itoa(int(first.Port))))
	for _, p := range svc.Spec.Ports {
		pr := strings.ToLower(string(p.Protocol))
		if pr == "" {
			pr = "tcp"
		}
		port := strconv.Itoa(int(p.Port))
		base := prefix + "_PORT_" + port + "_" + strings.ToUpper(pr)
		env = append(env,
			base+"="+pr+"://"+net.JoinHostPort(host, port),
			base+"_PROTO="+pr,
			base+"_PORT="+port,
			base+"_ADDR="+host)
	}
	return env
}

// apiEnvState is embedded in Agent for apiServiceEnv.
type apiEnvState struct {
	apiEnvMu sync.Mutex
	apiEnv   []string
}

// removeTokenMountPoint removes the empty directories made on the node to
// mount service account volumes on (/run/secrets/kubernetes.io/serviceaccount
// where /var/run is /run).
func removeTokenMountPoint() {
	const mountPath = "/var/run/secrets/kubernetes.io/serviceaccount"
	run, err := filepath.EvalSymlinks("/var/run")
	if err != nil {
		return
	}
	cni.RemoveBindTargets(filepath.Join(run, strings.TrimPrefix(mountPath, "/var/run/")), run)
}
