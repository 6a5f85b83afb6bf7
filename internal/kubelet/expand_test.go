package kubelet

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestExpandVars(t *testing.T) {
	vars := map[string]string{"A": "a", "POD_IPS": "10.244.1.5", "EMPTY": ""}
	lookup := func(n string) (string, bool) { v, ok := vars[n]; return v, ok }
	for _, tc := range []struct{ in, want string }{
		{"plain", "plain"},
		{"$(A)", "a"},
		{"x$(A)y$(A)", "xaya"},
		{"$(MISSING)", "$(MISSING)"},
		{"$$(A)", "$(A)"},
		{`check="$$(dig +notcp kubernetes A)" && test -n "$$check"`, `check="$(dig +notcp kubernetes A)" && test -n "$check"`},
		{"$$", "$"},
		{"$$$$", "$$"},
		{"$", "$"},
		{"a$", "a$"},
		{"$A", "$A"},
		{"$(", "$("},
		{"$(A", "$(A"},
		{"$(A $(A)", "$(A $(A)"},
		{"$(A $$", "$(A $"},
		{"$()", "$()"},
		{"$(EMPTY)x", "x"},
		{"--udp-listen-addresses=$(POD_IPS)", "--udp-listen-addresses=10.244.1.5"},
	} {
		if got := expandVars(tc.in, lookup); got != tc.want {
			t.Errorf("expandVars(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// Env values expand the Service variables and the entries before them, not
// later ones; command and args expand every entry, and neither sees the
// image's PATH.
func TestContainerEnvExpansion(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	spec := corev1.Container{Env: []corev1.EnvVar{
		{Name: "FIRST", Value: "1-$(SECOND)"},
		{Name: "SECOND", Value: "2"},
		{Name: "THIRD", Value: "$(SECOND)-$(KUBERNETES_SERVICE_HOST)-$$(x)"},
		{Name: "HOST", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}},
	}}
	env, lookup := containerEnv(pod, spec, "node1", []string{"10.244.1.5"}, []string{"192.168.0.2"}, []string{"KUBERNETES_SERVICE_HOST=10.96.0.1"})
	for _, want := range []string{"FIRST=1-$(SECOND)", "SECOND=2", "THIRD=2-10.96.0.1-$(x)", "HOST=192.168.0.2", "KUBERNETES_SERVICE_HOST=10.96.0.1"} {
		if !slices.Contains(env, want) {
			t.Errorf("env lacks %q: %q", want, env)
		}
	}
	got := expandArgv([]string{"echo", "$(FIRST)", "$(PATH)", "$(HOST)"}, lookup)
	if want := []string{"echo", "1-$(SECOND)", "$(PATH)", "192.168.0.2"}; !slices.Equal(got, want) {
		t.Errorf("expanded argv %q, want %q", got, want)
	}
}
