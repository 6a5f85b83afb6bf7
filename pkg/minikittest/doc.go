// Package minikittest runs minikit inside other people's Go tests: an API
// server in the test's own process (StartAPI), for the logic of a controller
// or an operator, and, as root, a whole lab of network namespaces
// (StartLab), for proving that what the controller made answers on the
// network.
//
// # StartAPI
//
// StartAPI starts minikit's API server in the test process, over a bbolt
// store in t.TempDir(), served over plain HTTP on 127.0.0.1 and a port the
// kernel picks, with minikit's controllers running against it; it needs no
// root, no network namespace and no download, and returns a *rest.Config for
// client-go or controller-runtime. It is real Kubernetes API machinery, not a
// fake client: validation, defaulting, resourceVersions and watches,
// server-side apply with managed fields and conflicts, the status and scale
// subresources, CustomResourceDefinitions (WithCRDs installs them from files
// or directories and waits until they are Established and in discovery).
//
// What the controllers do: Deployments make ReplicaSets and ReplicaSets
// make Pods, StatefulSets, DaemonSets and Jobs make theirs, Services get
// Endpoints and EndpointSlices, namespaces get their default ServiceAccount.
// The garbage collector deletes the dependents of deleted owners of every
// kind, custom resources included (background, foreground and orphan), so a
// test sees an operator's Deployment go with its custom resource.
//
// What does not happen: no container ever runs, because there is no node
// agent. The API starts with no Node, so Pods stay Pending and unscheduled;
// a test that creates a Node object gets Pods bound to it, still Pending. A
// test that needs Ready endpoints writes the Pods' status itself (podIP and
// the Ready condition through the status subresource), and the endpoints
// controller then lists them. Nothing answers on a Service's ClusterIP and
// there is no DNS: that is what StartLab is for. The returned config is
// the cluster's admin (no token, on loopback); there is no RBAC API yet and
// no call to admission webhooks.
//
// Every StartAPI is independent of every other (its own store, port and
// controllers), so tests that call t.Parallel each start their own; all of
// it is stopped and removed in t.Cleanup.
//
// # StartLab
//
// StartLab brings up a minikit lab (see `minikit lab up`): N nodes running
// the real minikit binary in network namespaces, a client host and an
// external host, with pods that run, Services that answer, cluster DNS and
// Ingress. It needs root and fails the test (never skips it) without it: a
// skipped integration test proves nothing. The lab is removed in t.Cleanup,
// also when the test panics, and also when the test binary dies without
// running its cleanups (a -timeout, os.Exit, SIGKILL): a small watchdog
// process removes it then.
//
// # controller-runtime's envtest
//
// Tests written for envtest keep their code: the subpackage envtestcompat
// turns an *envtest.Environment into one that runs against StartAPI
// (UseExistingCluster with minikit's config), and envtest then installs
// CRDDirectoryPaths and webhooks itself as it always does.
//
// # Compatibility
//
// This package follows semantic versioning with the minikit module: from
// v1.0.0 on, exported identifiers are not removed or changed incompatibly
// within a major version; new options and fields may be added. Options are
// functions (Option, LabOption) so that adding one never breaks a caller.
// The behaviour of the API server follows Kubernetes' (docs/differences.md
// lists where it differs on purpose) and improves from release to release:
// tests should rely on Kubernetes' documented semantics, not on a quirk of
// minikit's. Nothing under internal/ is part of the promise.
package minikittest
