package apiserver

import (
	"strings"
	"testing"
)

// kubectl api-resources lists the review APIs, create-only, as on a cluster.
func TestKubectlReviewDiscovery(t *testing.T) {
	a := newTestAPI(t)
	k := newKubectlCLI(t, a, kubectlBinaries(t)[0])
	out, errOut, err := k.run(t, "api-resources", "--api-group=authorization.k8s.io", "-o", "wide")
	if err != nil {
		t.Fatalf("kubectl api-resources: %v\n%s", err, errOut)
	}
	for _, want := range []string{"selfsubjectaccessreviews authorization.k8s.io/v1 false SelfSubjectAccessReview create",
		"localsubjectaccessreviews authorization.k8s.io/v1 true LocalSubjectAccessReview create"} {
		if !strings.Contains(words(out), want) {
			t.Errorf("api-resources lacks %q:\n%s", want, out)
		}
	}
	out, _, err = k.run(t, "api-resources", "--api-group=authentication.k8s.io", "-o", "name")
	if err != nil || !strings.Contains(out, "selfsubjectreviews.authentication.k8s.io") || !strings.Contains(out, "tokenreviews.authentication.k8s.io") {
		t.Errorf("api-resources authentication.k8s.io: %v\n%s", err, out)
	}
}
