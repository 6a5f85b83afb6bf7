package kubelet

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	utilexec "k8s.io/utils/exec"
)

// TestKubeletHandler checks the agent's kubelet port before any stream is
// upgraded: the token on every path, and the kubelet's refusals.
func TestKubeletHandler(t *testing.T) {
	logDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(logDir, "agent.log"), []byte("started\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	idx.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "0123456789abcdef"},
		Spec: corev1.PodSpec{NodeName: "node1", Containers: []corev1.Container{{Name: "app"}}}})
	idx.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "elsewhere", UID: "fedcba9876543210"},
		Spec: corev1.PodSpec{NodeName: "node2", Containers: []corev1.Container{{Name: "app"}}}})
	a := &Agent{cfg: Config{NodeName: "node1", LogDir: logDir, DataDir: t.TempDir()}, pods: corelisters.NewPodLister(idx), prefix: "mk-test-"}
	h := a.kubeletHandler("s3cret")

	for _, tc := range []struct {
		name, method, path string
		auth               func(*http.Request)
		code               int
		body               string
	}{
		{"no token", "GET", "/healthz", nil, 401, "Unauthorized"},
		{"wrong token", "POST", "/exec/default/web/app?command=true&output=1", bearer("nope"), 401, "Unauthorized"},
		{"no token exec", "POST", "/exec/default/web/app?command=true&output=1", nil, 401, "Unauthorized"},
		{"no token port-forward", "POST", "/portForward/default/web", nil, 401, "Unauthorized"},
		{"no token logs", "GET", "/logs/agent.log", nil, 401, "Unauthorized"},
		{"healthz", "GET", "/healthz", bearer("s3cret"), 200, "ok"},
		{"healthz basic", "GET", "/healthz", func(r *http.Request) { r.SetBasicAuth("apiserver", "s3cret") }, 200, "ok"},
		{"log dir listing", "GET", "/logs/", bearer("s3cret"), 200, "agent.log"},
		{"log file", "GET", "/logs/agent.log", bearer("s3cret"), 200, "started"},
		{"exec missing pod", "POST", "/exec/default/nope/app?command=true&output=1", bearer("s3cret"), 404, "pod does not exist"},
		{"exec pod of another node", "POST", "/exec/default/elsewhere/app?command=true&output=1", bearer("s3cret"), 404, "pod does not exist"},
		{"exec container not running", "POST", "/exec/default/web/app?command=true&output=1", bearer("s3cret"), 500, `container not found ("app")`},
		{"exec unknown container", "POST", "/exec/default/web/nope?command=true&output=1", bearer("s3cret"), 500, `container not found ("nope")`},
		{"exec no command", "POST", "/exec/default/web/app?output=1", bearer("s3cret"), 400, "at least one command"},
		{"exec no stream", "POST", "/exec/default/web/app?command=true", bearer("s3cret"), 400, "at least 1 of stdin, stdout, stderr"},
		{"exec bad path", "POST", "/exec/default/web?command=true&output=1", bearer("s3cret"), 400, "want /exec/NAMESPACE/POD/CONTAINER"},
		{"attach container not running", "POST", "/attach/default/web/app?output=1", bearer("s3cret"), 500, `container not found ("app")`},
		{"port-forward no sandbox", "POST", "/portForward/default/web", bearer("s3cret"), 500, "no running sandbox"},
		{"port-forward missing pod", "POST", "/portForward/default/nope", bearer("s3cret"), 404, "pod does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.path, nil)
			if tc.auth != nil {
				tc.auth(r)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.body) {
				t.Errorf("%s %s: got %d %q, want %d containing %q", tc.method, tc.path, w.Code, w.Body.String(), tc.code, tc.body)
			}
		})
	}
}

func bearer(tok string) func(*http.Request) {
	return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
}

// TestExitError checks what cri-streaming turns into kubectl's exit status.
func TestExitError(t *testing.T) {
	for _, tc := range []struct {
		script string
		code   int
	}{
		{"exit 0", -1}, {"exit 3", 3}, {"exit 255", 255}, {"kill -9 $$", 137}, {"kill -TERM $$", 143},
	} {
		err := exitError(exec.Command("sh", "-c", tc.script).Run())
		var ee utilexec.ExitError
		switch {
		case tc.code < 0 && err != nil:
			t.Errorf("%s: got %v, want success", tc.script, err)
		case tc.code >= 0 && (!errors.As(err, &ee) || !ee.Exited() || ee.ExitStatus() != tc.code):
			t.Errorf("%s: got %v, want exit status %d", tc.script, err, tc.code)
		}
	}
}
