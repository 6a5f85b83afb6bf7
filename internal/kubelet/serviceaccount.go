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

// A pod's projected volumes, as the kubelet materialises them (the service
// account's kube-api-access-XXXXX among them): a directory per volume with
// the files of its sources — serviceAccountToken (a TokenRequest bound to
// the pod, fetched with the node's credentials and refreshed at 80% of its
// lifetime, as the kubelet's token manager does), configMap, secret and
// downwardAPI — bind-mounted read-only at the volume's mount paths in the
// pod's mount namespace. Files are replaced by rename, so a reader never sees
// half a token. Ownership and modes follow pkg/volume/projected: a token is
// 0600 when the pod's containers all run as one user (owned by that user) or
// the pod has an fsGroup, and with an fsGroup every file and directory of
// the volume is given that group and group read (volumeOwnership).

// tokenState is when each projected token (by volume and path) must be
// fetched again, and each projected volume's other files (by volume name)
// read again.
type tokenState struct {
	refreshAt map[string]time.Time
}

func (w *podWorker) volumeDir(name string) string { return filepath.Join(w.dir(), "volumes", name) }

// ensureServiceAccountFiles writes the files of every projected volume,
// fetching a new token when none is held or the held one is due for refresh.
func (w *podWorker) ensureServiceAccountFiles(ctx context.Context, pod *corev1.Pod) error {
	fsUser, fsGroup := fsUserOf(pod), fsGroupOf(pod)
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if v.Projected == nil {
			continue
		}
		if err := w.ensureProjected(ctx, pod, v, fsUser, fsGroup); err != nil {
			return err
		}
	}
	return nil
}

func (w *podWorker) ensureProjected(ctx context.Context, pod *corev1.Pod, v *corev1.Volume, fsUser, fsGroup *int64) error {
	dir := w.volumeDir(v.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	mode := os.FileMode(0o644)
	if v.Projected.DefaultMode != nil {
		mode = os.FileMode(*v.Projected.DefaultMode) & os.ModePerm
	}
	if w.token.refreshAt == nil {
		w.token.refreshAt = map[string]time.Time{}
	}
	// The configMap, secret and downwardAPI sources are read from the API
	// at the first sync and then every volumeRefresh, as the volume files of
	// volumes.go are; a token when it is due.
	filesDue := !time.Now().Before(w.token.refreshAt[v.Name])
	wrote := false
	write := func(name string, data []byte, m os.FileMode, itemMode *int32) error {
		wrote = true
		if itemMode != nil {
			m = os.FileMode(*itemMode) & os.ModePerm
		}
		p := filepath.Join(dir, filepath.Clean("/"+name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		return writeAtomic(p, data, m)
	}
	for _, src := range v.Projected.Sources {
		switch {
		case src.ServiceAccountToken != nil:
			key := v.Name + "/" + src.ServiceAccountToken.Path
			p := filepath.Join(dir, filepath.Clean("/"+src.ServiceAccountToken.Path))
			if _, err := os.Stat(p); err == nil && time.Now().Before(w.token.refreshAt[key]) {
				continue
			}
			tok, next, err := w.requestToken(ctx, pod, src.ServiceAccountToken)
			if err != nil {
				return err
			}
			m := mode
			if fsUser != nil || fsGroup != nil {
				m = 0o600
			}
			if err := write(src.ServiceAccountToken.Path, []byte(tok), m, nil); err != nil {
				return err
			}
			if fsUser != nil {
				if err := os.Lchown(p, int(*fsUser), -1); err != nil {
					return fmt.Errorf("giving the token of volume %q to user %d: %w", v.Name, *fsUser, err)
				}
			}
			w.token.refreshAt[key] = next
		case !filesDue:
			continue
		case src.ConfigMap != nil:
			files, err := w.configMapFiles(ctx, pod, v.Name, src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional)
			if err != nil {
				return err
			}
			for name, data := range files {
				if err := write(name, data, mode, itemMode(src.ConfigMap.Items, name)); err != nil {
					return err
				}
			}
		case src.Secret != nil:
			files, err := w.secretFiles(ctx, pod, v.Name, src.Secret.Name, src.Secret.Items, src.Secret.Optional)
			if err != nil {
				return err
			}
			for name, data := range files {
				if err := write(name, data, mode, itemMode(src.Secret.Items, name)); err != nil {
					return err
				}
			}
		case src.DownwardAPI != nil:
			for name, data := range downwardAPIFiles(pod, src.DownwardAPI.Items) {
				var m *int32
				for _, it := range src.DownwardAPI.Items {
					if it.Path == name {
						m = it.Mode
					}
				}
				if err := write(name, data, mode, m); err != nil {
					return err
				}
			}
		}
	}
	if filesDue {
		w.token.refreshAt[v.Name] = time.Now().Add(volumeRefresh)
	}
	if !wrote {
		return nil
	}
	return volumeOwnership(dir, fsGroup, true)
}

// itemMode is the mode the item writing path asks for, if any.
func itemMode(items []corev1.KeyToPath, path string) *int32 {
	for _, it := range items {
		if it.Path == path {
			return it.Mode
		}
	}
	return nil
}

// fsUserOf is the user every container of the pod runs as, when they all run
// as one (volumeutil.FsUserFrom): a container's runAsUser, else the pod's.
func fsUserOf(pod *corev1.Pod) *int64 {
	var podUser *int64
	if pod.Spec.SecurityContext != nil {
		podUser = pod.Spec.SecurityContext.RunAsUser
	}
	var scs []*corev1.SecurityContext
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			scs = append(scs, c.SecurityContext)
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		scs = append(scs, c.SecurityContext)
	}
	var user *int64
	for _, sc := range scs {
		u := podUser
		if sc != nil && sc.RunAsUser != nil {
			u = sc.RunAsUser
		}
		if u == nil || (user != nil && *user != *u) {
			return nil
		}
		user = u
	}
	return user
}

func fsGroupOf(pod *corev1.Pod) *int64 {
	if pod.Spec.SecurityContext == nil {
		return nil
	}
	return pod.Spec.SecurityContext.FSGroup
}

// volumeOwnership gives every file and directory under dir the pod's
// fsGroup and group access, as the kubelet's SetVolumeOwnership does:
// read (and write, for a writable volume) for files, plus search and setgid
// for directories. Without an fsGroup it changes nothing.
func volumeOwnership(dir string, fsGroup *int64, readOnly bool) error {
	if fsGroup == nil {
		return nil
	}
	mask := os.FileMode(0o660)
	if readOnly {
		mask = 0o440
	}
	return filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(p, -1, int(*fsGroup)); err != nil {
			return fmt.Errorf("giving %s to group %d: %w", p, *fsGroup, err)
		}
		if info.Mode()&os.ModeSymlink != 0 {
			return nil
		}
		m := mask
		if info.IsDir() {
			m |= os.ModeSetgid | 0o110
		}
		if want := info.Mode() | m; want != info.Mode() {
			return os.Chmod(p, want)
		}
		return nil
	})
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
