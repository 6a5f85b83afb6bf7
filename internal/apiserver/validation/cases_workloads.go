package validation

import (
	"strconv"
	"strings"
)

// workloadBadManifests are the invalid StatefulSets, DaemonSets and Jobs of
// BadManifests.
func workloadBadManifests() []BadManifest {
	const sts = `apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
spec:
  serviceName: nginx
  selector:
    matchLabels:
      app: nginx
  template:
    metadata:
      labels:
        app: nginx
    spec:
      containers:
      - name: nginx
        image: nginx
`
	const ds = `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: ingress
spec:
  selector:
    matchLabels:
      app: ingress
  template:
    metadata:
      labels:
        app: ingress
    spec:
      containers:
      - name: nginx
        image: nginx
`
	const job = `apiVersion: batch/v1
kind: Job
metadata:
  name: lookup
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: lookup
        image: busybox
        command: ["nslookup", "kubernetes.default"]
`
	return []BadManifest{
		// StatefulSets.
		{
			Name: "statefulset-selector-does-not-match", Field: "spec.template.metadata.labels",
			Message: "`selector` does not match template `labels`",
			YAML:    replaceOnce(sts, "        app: nginx\n", "        app: web\n"),
		},
		{
			Name: "statefulset-volume-claim-templates", Field: "spec.volumeClaimTemplates",
			Message: "minikit has no storage",
			YAML: sts + `  volumeClaimTemplates:
  - metadata:
      name: www
    spec:
      accessModes: ["ReadWriteOnce"]
      resources:
        requests:
          storage: 1Gi
`,
		},
		{
			Name: "statefulset-unknown-pod-management-policy", Field: "spec.podManagementPolicy",
			Message: "must be 'OrderedReady' or 'Parallel'",
			YAML:    sts + "  podManagementPolicy: OneByOne\n",
		},
		{
			Name: "statefulset-negative-partition", Field: "spec.updateStrategy.rollingUpdate.partition",
			Message: "must be greater than or equal to 0",
			YAML:    sts + "  updateStrategy:\n    type: RollingUpdate\n    rollingUpdate:\n      partition: -1\n",
		},
		{
			Name: "statefulset-restart-policy-never", Field: "spec.template.spec.restartPolicy",
			Message: `Unsupported value: "Never"`,
			YAML:    replaceOnce(sts, "      containers:\n", "      restartPolicy: Never\n      containers:\n"),
		},
		{
			Name: "statefulset-negative-replicas", Field: "spec.replicas",
			Message: "must be greater than or equal to 0",
			YAML:    sts + "  replicas: -1\n",
		},

		// DaemonSets.
		{
			Name: "daemonset-without-selector", Field: "spec.selector",
			Message: "Required value",
			YAML:    replaceOnce(ds, "  selector:\n    matchLabels:\n      app: ingress\n", ""),
		},
		{
			Name: "daemonset-restart-policy-on-failure", Field: "spec.template.spec.restartPolicy",
			Message: `Unsupported value: "OnFailure"`,
			YAML:    replaceOnce(ds, "      containers:\n", "      restartPolicy: OnFailure\n      containers:\n"),
		},
		{
			Name: "daemonset-unknown-update-strategy", Field: "spec.updateStrategy.type",
			Message: `Unsupported value: "Recreate"`,
			YAML:    ds + "  updateStrategy:\n    type: Recreate\n",
		},
		{
			Name: "daemonset-max-unavailable-zero", Field: "spec.updateStrategy.rollingUpdate.maxUnavailable",
			Message: "may not be 0 when `maxSurge` is 0",
			YAML:    ds + "  updateStrategy:\n    type: RollingUpdate\n    rollingUpdate:\n      maxUnavailable: 0\n",
		},

		{
			Name: "daemonset-max-surge", Field: "spec.updateStrategy.rollingUpdate.maxSurge",
			Message: "does not surge pods",
			YAML:    ds + "  updateStrategy:\n    type: RollingUpdate\n    rollingUpdate:\n      maxSurge: 1\n",
		},

		// Jobs.
		{
			Name: "job-restart-policy-always", Field: "spec.template.spec.restartPolicy",
			Message: `Unsupported value: "Always"`,
			YAML:    replaceOnce(job, "restartPolicy: Never", "restartPolicy: Always"),
		},
		{
			Name: "job-negative-completions", Field: "spec.completions",
			Message: "must be greater than or equal to 0",
			YAML:    replaceOnce(job, "spec:\n  template:", "spec:\n  completions: -1\n  template:"),
		},
		{
			Name: "job-negative-parallelism", Field: "spec.parallelism",
			Message: "must be greater than or equal to 0",
			YAML:    replaceOnce(job, "spec:\n  template:", "spec:\n  parallelism: -2\n  template:"),
		},
		{
			Name: "job-negative-backoff-limit", Field: "spec.backoffLimit",
			Message: "must be greater than or equal to 0",
			YAML:    replaceOnce(job, "spec:\n  template:", "spec:\n  backoffLimit: -1\n  template:"),
		},
		{
			Name: "job-indexed-completion-mode", Field: "spec.completionMode",
			Message: "Indexed jobs are not supported by minikit",
			YAML:    replaceOnce(job, "spec:\n  template:", "spec:\n  completions: 3\n  completionMode: Indexed\n  template:"),
		},
	}
}

// replaceOnce replaces the one occurrence of old in s, and panics when
// there is none, so a test manifest cannot silently stay valid.
func replaceOnce(s, old, new string) string {
	i := strings.Index(s, old)
	if i < 0 {
		panic("replaceOnce: " + strconv.Quote(old) + " not in manifest")
	}
	return s[:i] + new + s[i+len(old):]
}
