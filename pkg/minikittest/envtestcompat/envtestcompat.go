// Package envtestcompat runs tests written for controller-runtime's envtest
// against minikit's in-process API server (minikittest.StartAPI) instead of
// a downloaded kube-apiserver and etcd: no setup-envtest, no
// KUBEBUILDER_ASSETS, a start in milliseconds, and minikit's controllers
// (Deployments make Pods, garbage collection), which envtest does not run.
//
// A test keeps its envtest.Environment, its Start and its Stop; one line
// hands it to minikit before Start:
//
//	testEnv := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("..", "config", "crd", "bases")}}
//	envtestcompat.Use(t, testEnv) // the one added line
//	cfg, err := testEnv.Start()
//
// Use sets UseExistingCluster and Config, so envtest starts no control
// plane and installs CRDDirectoryPaths (and webhooks) into minikit itself,
// as it does into any existing cluster; minikit's API is stopped in
// t.Cleanup, testEnv.Stop then has nothing left to stop. Suites that start
// one environment in BeforeSuite or TestMain, where there is no t, call
// minikittest.StartAPI with the suite's first *testing.T instead, or run a
// `minikit server --disable-agent` and point envtest at its kubeconfig with
// USE_EXISTING_CLUSTER=true.
//
// The package follows minikittest's compatibility promise.
package envtestcompat

import (
	"testing"

	"github.com/minikit/minikit/pkg/minikittest"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Use points env at a new minikittest.StartAPI (started with opts) and
// returns env: env.Start then uses it as an existing cluster.
func Use(t testing.TB, env *envtest.Environment, opts ...minikittest.Option) *envtest.Environment {
	t.Helper()
	existing := true
	env.UseExistingCluster = &existing
	env.Config = minikittest.StartAPI(t, opts...)
	return env
}
