package validation

// replicaSetBadManifests are the ReplicaSet and ReplicationController
// manifests of BadManifests.
func replicaSetBadManifests() []BadManifest {
	const rsTemplate = `  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: web
        image: nginx:1.27
`
	return []BadManifest{
		{
			Name:    "replicaset-selector-does-not-match",
			Field:   "spec.template.metadata.labels",
			Message: "`selector` does not match template `labels`",
			YAML: `apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: web
spec:
  replicas: 3
  selector:
    matchLabels:
      app: frontend
` + rsTemplate,
		},
		{
			Name:    "replicaset-negative-replicas",
			Field:   "spec.replicas",
			Message: "must be greater than or equal to 0",
			YAML: `apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: web
spec:
  replicas: -2
  selector:
    matchLabels:
      app: web
` + rsTemplate,
		},
		{
			Name:    "replicaset-without-selector",
			Field:   "spec.selector",
			Message: "Required value",
			YAML: `apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: web
spec:
` + rsTemplate,
		},
		{
			Name:    "replicaset-restart-policy-onfailure",
			Field:   "spec.template.spec.restartPolicy",
			Message: `Unsupported value: "OnFailure"`,
			YAML: `apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: web
spec:
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      restartPolicy: OnFailure
      containers:
      - name: web
        image: nginx:1.27
`,
		},
		{
			Name:    "replicationcontroller-without-template",
			Field:   "spec.template",
			Message: "Required value",
			YAML: `apiVersion: v1
kind: ReplicationController
metadata:
  name: web
spec:
  replicas: 2
  selector:
    app: web
`,
		},
		{
			Name:    "replicationcontroller-selector-does-not-match",
			Field:   "spec.template.metadata.labels",
			Message: "`selector` does not match template `labels`",
			YAML: `apiVersion: v1
kind: ReplicationController
metadata:
  name: web
spec:
  selector:
    app: frontend
` + rsTemplate,
		},
		{
			Name:    "replicationcontroller-negative-replicas",
			Field:   "spec.replicas",
			Message: "must be greater than or equal to 0",
			YAML: `apiVersion: v1
kind: ReplicationController
metadata:
  name: web
spec:
  replicas: -1
` + rsTemplate,
		},
	}
}
