package kubeproxy

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/iptables/iptablestest"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// get asks h for path and decodes kube-proxy's health JSON.
func getHealth(t *testing.T, h http.Handler, path string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("%s: %v: %s", path, err, rec.Body)
	}
	return rec.Code, body
}

// kube-proxy's /healthz: 503 until the node is known, 200 with lastUpdated
// once it is; 503 again when a change has waited longer than twice the sync
// period, or the node is being deleted; /livez ignores the node.
func TestProxyHealthz(t *testing.T) {
	ipt := iptablestest.NewFake()
	p, _ := testProxier(t, ipt)
	clock := p.clock.(*fakeClock)
	h := p.HealthzHandler()
	mustSync(t, p)

	if code, body := getHealth(t, h, "/healthz"); code != 503 || body["nodeEligible"] != false {
		t.Errorf("/healthz before the node is known = %d %v, want 503 nodeEligible false", code, body)
	}
	if code, _ := getHealth(t, h, "/livez"); code != 200 {
		t.Errorf("/livez = %d, want 200", code)
	}

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}}
	p.SetNode(node)
	code, body := getHealth(t, h, "/healthz")
	if code != 200 || body["healthy"] != true || body["nodeEligible"] != true {
		t.Errorf("/healthz = %d %v, want 200 healthy", code, body)
	}
	if _, ok := body["lastUpdated"]; !ok {
		t.Errorf("/healthz has no lastUpdated: %v", body)
	}

	// A change no sync has programmed for 2 × the sync period.
	p.OnServiceUpdate(makeService("ns", "web", "10.96.0.10"))
	clock.Step(time.Minute + time.Second)
	if code, body := getHealth(t, h, "/healthz"); code != 503 || body["healthy"] != false {
		t.Errorf("/healthz with a change pending for 61s = %d %v, want 503", code, body)
	}
	if code, _ := getHealth(t, h, "/livez"); code != 503 {
		t.Errorf("/livez with a change pending for 61s = %d, want 503", code)
	}
	mustSync(t, p)
	if code, _ := getHealth(t, h, "/healthz"); code != 200 {
		t.Errorf("/healthz after the sync = %d, want 200", code)
	}

	deleting := node.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
	p.SetNode(deleting)
	if code, _ := getHealth(t, h, "/healthz"); code != 503 {
		t.Errorf("/healthz of a node being deleted = %d, want 503", code)
	}
	tainted := node.DeepCopy()
	tainted.Spec.Taints = []corev1.Taint{{Key: toBeDeletedTaint, Effect: corev1.TaintEffectNoSchedule}}
	p.SetNode(tainted)
	if code, _ := getHealth(t, h, "/healthz"); code != 503 {
		t.Errorf("/healthz of a node the autoscaler removes = %d, want 503", code)
	}
}
