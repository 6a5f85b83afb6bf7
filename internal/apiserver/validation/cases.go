package validation

// BadManifest is an invalid manifest and what the API must say about it.
// YAML is a complete manifest (apiVersion, kind, no metadata.namespace, so
// the server puts namespaced objects in "default") that is invalid for one
// reason only; every error Validate returns for it, after Default, is on
// Field, and one of them contains Message.
type BadManifest struct{ Name, YAML, Field, Message string }

// BadManifests returns manifests that kubectl users commonly get wrong, with
// the field path and message Kubernetes answers with. The unit tests check
// them against Validate; the API server's tests can post them and expect a
// 422 naming the same field.
func BadManifests() []BadManifest {
	all := []BadManifest{
		// Services.
		{
			Name:    "service-nodeport-out-of-range",
			Field:   "spec.ports[0].nodePort",
			Message: "provided port is not in the valid range. The range of valid ports is 30000-32767",
			YAML: `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  type: NodePort
  selector:
    app: web
  ports:
  - port: 80
    targetPort: 8080
    nodePort: 8080
`,
		},
		{
			Name:    "service-port-zero",
			Field:   "spec.ports[0].port",
			Message: "must be between 1 and 65535, inclusive",
			YAML: `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector:
    app: web
  ports:
  - port: 0
    targetPort: 8080
`,
		},
		{
			Name:    "service-port-too-large",
			Field:   "spec.ports[0].port",
			Message: "must be between 1 and 65535, inclusive",
			YAML: `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector:
    app: web
  ports:
  - port: 70000
    targetPort: 8080
`,
		},
		{
			Name:    "service-unsupported-protocol",
			Field:   "spec.ports[0].protocol",
			Message: `Unsupported value: "HTTP"`,
			YAML: `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector:
    app: web
  ports:
  - port: 80
    protocol: HTTP
`,
		},
		{
			Name:    "service-second-port-unnamed",
			Field:   "spec.ports[1].name",
			Message: "Required value",
			YAML: `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector:
    app: web
  ports:
  - name: http
    port: 80
  - port: 443
`,
		},
		{
			Name:    "service-duplicate-port-name",
			Field:   "spec.ports[1].name",
			Message: `Duplicate value: "http"`,
			YAML: `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector:
    app: web
  ports:
  - name: http
    port: 80
  - name: http
    port: 8080
`,
		},
		{
			Name:    "service-uppercase-port-name",
			Field:   "spec.ports[0].name",
			Message: "must consist of lower case alphanumeric characters or '-'",
			YAML: `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector:
    app: web
  ports:
  - name: HTTP
    port: 80
`,
		},
		{
			Name:    "service-duplicate-port-protocol",
			Field:   "spec.ports[1]",
			Message: "Duplicate value",
			YAML: `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector:
    app: web
  ports:
  - name: http
    port: 80
    targetPort: 8080
  - name: http-alt
    port: 80
    targetPort: 8081
`,
		},
		{
			Name:    "service-bad-target-port-name",
			Field:   "spec.ports[0].targetPort",
			Message: "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
			YAML: `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector:
    app: web
  ports:
  - port: 80
    targetPort: http_web
`,
		},
		{
			Name:    "service-cluster-ip-outside-range",
			Field:   "spec.clusterIP",
			Message: "provided IP is not in the valid range. The range of valid IPs is 10.96.0.0/12",
			YAML: `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  clusterIP: 10.0.0.10
  selector:
    app: web
  ports:
  - port: 80
`,
		},
		{
			Name:    "service-cluster-ip-not-an-ip",
			Field:   "spec.clusterIP",
			Message: "must be a valid IP address",
			YAML: `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  clusterIP: 10.96.0.300
  selector:
    app: web
  ports:
  - port: 80
`,
		},
		{
			Name:    "service-headless-nodeport",
			Field:   "spec.clusterIP",
			Message: "may not be set to 'None' for NodePort services",
			YAML: `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  type: NodePort
  clusterIP: None
  selector:
    app: web
  ports:
  - port: 80
`,
		},
		{
			Name:    "service-headless-loadbalancer",
			Field:   "spec.clusterIP",
			Message: "may not be set to 'None' for LoadBalancer services",
			YAML: `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  type: LoadBalancer
  clusterIP: None
  selector:
    app: web
  ports:
  - port: 80
`,
		},
		{
			Name:    "service-nodeport-on-clusterip",
			Field:   "spec.ports[0].nodePort",
			Message: "may not be used when `type` is 'ClusterIP'",
			YAML: `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  type: ClusterIP
  selector:
    app: web
  ports:
  - port: 80
    nodePort: 30080
`,
		},
		{
			Name:    "service-unknown-type",
			Field:   "spec.type",
			Message: `Unsupported value: "Internal"`,
			YAML: `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  type: Internal
  selector:
    app: web
  ports:
  - port: 80
`,
		},
		{
			Name:    "service-externalname-missing",
			Field:   "spec.externalName",
			Message: "Required value",
			YAML: `apiVersion: v1
kind: Service
metadata:
  name: db
spec:
  type: ExternalName
`,
		},
		{
			Name:    "service-externalname-underscore",
			Field:   "spec.externalName",
			Message: "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters",
			YAML: `apiVersion: v1
kind: Service
metadata:
  name: db
spec:
  type: ExternalName
  externalName: my_db.example.com
`,
		},
		{
			Name:    "service-without-ports",
			Field:   "spec.ports",
			Message: "Required value",
			YAML: `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector:
    app: web
`,
		},
		{
			Name:    "service-name-with-dot",
			Field:   "metadata.name",
			Message: "must not contain dots",
			YAML: `apiVersion: v1
kind: Service
metadata:
  name: web.frontend
spec:
  selector:
    app: web
  ports:
  - port: 80
`,
		},
		{
			Name:    "service-uppercase-name",
			Field:   "metadata.name",
			Message: "must consist of lower case alphanumeric characters or '-'",
			YAML: `apiVersion: v1
kind: Service
metadata:
  name: MyService
spec:
  selector:
    app: web
  ports:
  - port: 80
`,
		},
		{
			Name:    "service-selector-value-with-space",
			Field:   "spec.selector",
			Message: "a valid label must be an empty string or consist of alphanumeric characters",
			YAML: `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector:
    app: web server
  ports:
  - port: 80
`,
		},
		{
			Name:    "service-external-ip-invalid",
			Field:   "spec.externalIPs[0]",
			Message: "must be a valid IP address",
			YAML: `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector:
    app: web
  externalIPs:
  - 198.51.100
  ports:
  - port: 80
`,
		},
		{
			Name:    "service-local-policy-on-clusterip",
			Field:   "spec.externalTrafficPolicy",
			Message: "may only be set for externally-accessible services",
			YAML: `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  externalTrafficPolicy: Local
  selector:
    app: web
  ports:
  - port: 80
`,
		},
		{
			Name:    "service-unknown-session-affinity",
			Field:   "spec.sessionAffinity",
			Message: `Unsupported value: "Sticky"`,
			YAML: `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  sessionAffinity: Sticky
  selector:
    app: web
  ports:
  - port: 80
`,
		},
		{
			Name:    "service-affinity-timeout-too-long",
			Field:   "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
			Message: "must be greater than 0 and less than 86400",
			YAML: `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  sessionAffinity: ClientIP
  sessionAffinityConfig:
    clientIP:
      timeoutSeconds: 100000
  selector:
    app: web
  ports:
  - port: 80
`,
		},
		{
			Name:    "service-bad-source-range",
			Field:   "spec.loadBalancerSourceRanges[0]",
			Message: "must be a valid CIDR value",
			YAML: `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  type: LoadBalancer
  loadBalancerSourceRanges:
  - 203.0.113.0/33
  selector:
    app: web
  ports:
  - port: 80
`,
		},
		{
			Name:    "service-health-check-port-without-local",
			Field:   "spec.healthCheckNodePort",
			Message: "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
			YAML: `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  type: NodePort
  healthCheckNodePort: 30500
  selector:
    app: web
  ports:
  - port: 80
`,
		},
		{
			Name:    "service-unknown-internal-policy",
			Field:   "spec.internalTrafficPolicy",
			Message: `Unsupported value: "Node"`,
			YAML: `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  internalTrafficPolicy: Node
  selector:
    app: web
  ports:
  - port: 80
`,
		},

		// Pods.
		{
			Name:    "pod-without-containers",
			Field:   "spec.containers",
			Message: "Required value",
			YAML: `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers: []
`,
		},
		{
			Name:    "pod-container-name-underscore",
			Field:   "spec.containers[0].name",
			Message: "must consist of lower case alphanumeric characters or '-'",
			YAML: `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: web_server
    image: nginx:1.27
`,
		},
		{
			Name:    "pod-duplicate-container-name",
			Field:   "spec.containers[1].name",
			Message: `Duplicate value: "web"`,
			YAML: `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: web
    image: nginx:1.27
  - name: web
    image: busybox:1.36
    command: ["sleep", "3600"]
`,
		},
		{
			Name:    "pod-container-without-image",
			Field:   "spec.containers[0].image",
			Message: "Required value",
			YAML: `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: web
`,
		},
		{
			Name:    "pod-container-port-too-large",
			Field:   "spec.containers[0].ports[0].containerPort",
			Message: "must be between 1 and 65535, inclusive",
			YAML: `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: web
    image: nginx:1.27
    ports:
    - containerPort: 80800
`,
		},
		{
			Name:    "pod-port-name-too-long",
			Field:   "spec.containers[0].ports[0].name",
			Message: "must be no more than 15 characters",
			YAML: `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: web
    image: nginx:1.27
    ports:
    - name: http-web-server-port
      containerPort: 80
`,
		},
		{
			Name:    "pod-duplicate-port-name",
			Field:   "spec.containers[0].ports[1].name",
			Message: `Duplicate value: "http"`,
			YAML: `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: web
    image: nginx:1.27
    ports:
    - name: http
      containerPort: 80
    - name: http
      containerPort: 8080
`,
		},
		{
			Name:    "pod-unknown-port-protocol",
			Field:   "spec.containers[0].ports[0].protocol",
			Message: `Unsupported value: "ICMP"`,
			YAML: `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: web
    image: nginx:1.27
    ports:
    - containerPort: 80
      protocol: ICMP
`,
		},
		{
			Name:    "pod-unknown-restart-policy",
			Field:   "spec.restartPolicy",
			Message: `Unsupported value: "Sometimes"`,
			YAML: `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  restartPolicy: Sometimes
  containers:
  - name: web
    image: nginx:1.27
`,
		},
		{
			Name:    "pod-unknown-dns-policy",
			Field:   "spec.dnsPolicy",
			Message: `Unsupported value: "Custom"`,
			YAML: `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  dnsPolicy: Custom
  containers:
  - name: web
    image: nginx:1.27
`,
		},
		{
			Name:    "pod-hostname-with-dot",
			Field:   "spec.hostname",
			Message: "must not contain dots",
			YAML: `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  hostname: web.01
  containers:
  - name: web
    image: nginx:1.27
`,
		},
		{
			Name:    "pod-subdomain-uppercase",
			Field:   "spec.subdomain",
			Message: "must consist of lower case alphanumeric characters or '-'",
			YAML: `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  subdomain: Web
  containers:
  - name: web
    image: nginx:1.27
`,
		},
		{
			Name:    "pod-probe-port-zero",
			Field:   "spec.containers[0].livenessProbe.httpGet.port",
			Message: "must be between 1 and 65535, inclusive",
			YAML: `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: web
    image: nginx:1.27
    livenessProbe:
      httpGet:
        path: /healthz
        port: 0
`,
		},
		{
			Name:    "pod-liveness-success-threshold",
			Field:   "spec.containers[0].livenessProbe.successThreshold",
			Message: "must be 1",
			YAML: `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: web
    image: nginx:1.27
    livenessProbe:
      tcpSocket:
        port: 80
      successThreshold: 3
`,
		},
		{
			Name:    "pod-node-selector-key-with-space",
			Field:   "spec.nodeSelector",
			Message: "name part must consist of alphanumeric characters",
			YAML: `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  nodeSelector:
    disk type: ssd
  containers:
  - name: web
    image: nginx:1.27
`,
		},
		{
			Name:    "pod-mount-of-missing-volume",
			Field:   "spec.containers[0].volumeMounts[0].name",
			Message: `Not found: "data"`,
			YAML: `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: web
    image: nginx:1.27
    volumeMounts:
    - name: data
      mountPath: /data
`,
		},

		// Deployments.
		{
			Name:    "deployment-selector-does-not-match",
			Field:   "spec.template.metadata.labels",
			Message: "`selector` does not match template `labels`",
			YAML: `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 3
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: frontend
    spec:
      containers:
      - name: web
        image: nginx:1.27
`,
		},
		{
			Name:    "deployment-without-selector",
			Field:   "spec.selector",
			Message: "Required value",
			YAML: `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: web
        image: nginx:1.27
`,
		},
		{
			Name:    "deployment-negative-replicas",
			Field:   "spec.replicas",
			Message: "must be greater than or equal to 0",
			YAML: `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: -1
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: web
        image: nginx:1.27
`,
		},
		{
			Name:    "deployment-unknown-strategy",
			Field:   "spec.strategy.type",
			Message: `Unsupported value: "BlueGreen"`,
			YAML: `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  strategy:
    type: BlueGreen
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: web
        image: nginx:1.27
`,
		},
		{
			Name:    "deployment-restart-policy-never",
			Field:   "spec.template.spec.restartPolicy",
			Message: `Unsupported value: "Never"`,
			YAML: `apiVersion: apps/v1
kind: Deployment
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
      restartPolicy: Never
      containers:
      - name: web
        image: nginx:1.27
`,
		},
		{
			Name:    "deployment-container-without-image",
			Field:   "spec.template.spec.containers[0].image",
			Message: "Required value",
			YAML: `apiVersion: apps/v1
kind: Deployment
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
      containers:
      - name: web
`,
		},
		{
			Name:    "deployment-zero-surge-and-unavailable",
			Field:   "spec.strategy.rollingUpdate.maxUnavailable",
			Message: "may not be 0 when `maxSurge` is 0",
			YAML: `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 0
      maxUnavailable: 0
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: web
        image: nginx:1.27
`,
		},

		// Namespaces.
		{
			Name:    "namespace-underscore",
			Field:   "metadata.name",
			Message: "must consist of lower case alphanumeric characters or '-'",
			YAML: `apiVersion: v1
kind: Namespace
metadata:
  name: team_a
`,
		},
		{
			Name:    "namespace-with-dot",
			Field:   "metadata.name",
			Message: "must not contain dots",
			YAML: `apiVersion: v1
kind: Namespace
metadata:
  name: team.a
`,
		},
		{
			Name:    "namespace-too-long",
			Field:   "metadata.name",
			Message: "must be no more than 63 characters",
			YAML: `apiVersion: v1
kind: Namespace
metadata:
  name: this-namespace-name-is-far-too-long-to-be-a-single-dns-label-abc
`,
		},

		// Ingresses.
		{
			Name:    "ingress-ip-host",
			Field:   "spec.rules[0].host",
			Message: "must be a DNS name, not an IP address",
			YAML: `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
spec:
  rules:
  - host: 192.168.1.10
    http:
      paths:
      - path: /
        pathType: Prefix
        backend:
          service:
            name: web
            port:
              number: 80
`,
		},
		{
			Name:    "ingress-double-wildcard",
			Field:   "spec.rules[0].host",
			Message: "a wildcard DNS-1123 subdomain must start with '*.'",
			YAML: `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
spec:
  rules:
  - host: "*.*.example.com"
    http:
      paths:
      - path: /
        pathType: Prefix
        backend:
          service:
            name: web
            port:
              number: 80
`,
		},
		{
			Name:    "ingress-relative-path",
			Field:   "spec.rules[0].http.paths[0].path",
			Message: "must be an absolute path",
			YAML: `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
spec:
  rules:
  - host: shop.example.com
    http:
      paths:
      - path: api
        pathType: Prefix
        backend:
          service:
            name: api
            port:
              number: 8080
`,
		},
		{
			Name:    "ingress-missing-path-type",
			Field:   "spec.rules[0].http.paths[0].pathType",
			Message: "pathType must be specified",
			YAML: `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
spec:
  rules:
  - host: shop.example.com
    http:
      paths:
      - path: /
        backend:
          service:
            name: web
            port:
              number: 80
`,
		},
		{
			Name:    "ingress-unknown-path-type",
			Field:   "spec.rules[0].http.paths[0].pathType",
			Message: `Unsupported value: "Regex"`,
			YAML: `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
spec:
  rules:
  - host: shop.example.com
    http:
      paths:
      - path: /api
        pathType: Regex
        backend:
          service:
            name: api
            port:
              number: 8080
`,
		},
		{
			Name:    "ingress-port-name-and-number",
			Field:   "spec.rules[0].http.paths[0].backend",
			Message: "cannot set both port name & port number",
			YAML: `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
spec:
  rules:
  - host: shop.example.com
    http:
      paths:
      - path: /
        pathType: Prefix
        backend:
          service:
            name: web
            port:
              name: http
              number: 80
`,
		},
		{
			Name:    "ingress-backend-without-port",
			Field:   "spec.rules[0].http.paths[0].backend",
			Message: "port name or number is required",
			YAML: `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
spec:
  rules:
  - host: shop.example.com
    http:
      paths:
      - path: /
        pathType: Prefix
        backend:
          service:
            name: web
`,
		},
		{
			Name:    "ingress-backend-port-too-large",
			Field:   "spec.rules[0].http.paths[0].backend.service.port.number",
			Message: "must be between 1 and 65535, inclusive",
			YAML: `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
spec:
  rules:
  - host: shop.example.com
    http:
      paths:
      - path: /
        pathType: Prefix
        backend:
          service:
            name: web
            port:
              number: 80800
`,
		},
		{
			Name:    "ingress-without-rules-or-default",
			Field:   "spec",
			Message: "either `defaultBackend` or `rules` must be specified",
			YAML: `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
spec:
  ingressClassName: nginx
`,
		},
		{
			Name:    "ingress-tls-secret-name-uppercase",
			Field:   "spec.tls[0].secretName",
			Message: "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters",
			YAML: `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
spec:
  tls:
  - hosts:
    - shop.example.com
    secretName: Shop-TLS
  rules:
  - host: shop.example.com
    http:
      paths:
      - path: /
        pathType: Prefix
        backend:
          service:
            name: web
            port:
              number: 80
`,
		},
		{
			Name:    "ingress-backend-service-name-with-dot",
			Field:   "spec.defaultBackend.service.name",
			Message: "must not contain dots",
			YAML: `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
spec:
  defaultBackend:
    service:
      name: web.default
      port:
        number: 80
`,
		},

		// ConfigMaps and Secrets.
		{
			Name:    "configmap-key-with-space",
			Field:   "data[app config.yaml]",
			Message: "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
			YAML: `apiVersion: v1
kind: ConfigMap
metadata:
  name: app
data:
  app config.yaml: |
    debug: true
`,
		},
		{
			Name:    "configmap-key-in-data-and-binary-data",
			Field:   "data[logo.png]",
			Message: "duplicate of key present in binaryData",
			YAML: `apiVersion: v1
kind: ConfigMap
metadata:
  name: app
data:
  logo.png: placeholder
binaryData:
  logo.png: iVBORw0KGgo=
`,
		},
		{
			Name:    "configmap-uppercase-name",
			Field:   "metadata.name",
			Message: "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters",
			YAML: `apiVersion: v1
kind: ConfigMap
metadata:
  name: AppConfig
data:
  mode: production
`,
		},
		{
			Name:    "secret-tls-without-key",
			Field:   "data[tls.key]",
			Message: "Required value",
			YAML: `apiVersion: v1
kind: Secret
metadata:
  name: shop-tls
type: kubernetes.io/tls
data:
  tls.crt: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
`,
		},
		{
			Name:    "secret-key-with-slash",
			Field:   "data[db/password]",
			Message: "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
			YAML: `apiVersion: v1
kind: Secret
metadata:
  name: db
type: Opaque
stringData:
  db/password: s3cr3t
`,
		},

		// Endpoints and EndpointSlices.
		{
			Name:    "endpoints-invalid-ip",
			Field:   "subsets[0].addresses[0].ip",
			Message: "must be a valid IP address",
			YAML: `apiVersion: v1
kind: Endpoints
metadata:
  name: db
subsets:
- addresses:
  - ip: 10.244.1
  ports:
  - port: 5432
`,
		},
		{
			Name:    "endpoints-loopback-ip",
			Field:   "subsets[0].addresses[0].ip",
			Message: "may not be in the loopback range (127.0.0.0/8, ::1/128)",
			YAML: `apiVersion: v1
kind: Endpoints
metadata:
  name: db
subsets:
- addresses:
  - ip: 127.0.0.1
  ports:
  - port: 5432
`,
		},
		{
			Name:    "endpoints-duplicate-port-name",
			Field:   "subsets[0].ports[1].name",
			Message: `Duplicate value: "db"`,
			YAML: `apiVersion: v1
kind: Endpoints
metadata:
  name: db
subsets:
- addresses:
  - ip: 10.244.1.5
  ports:
  - name: db
    port: 5432
  - name: db
    port: 5433
`,
		},
		{
			Name:    "endpoints-port-zero",
			Field:   "subsets[0].ports[0].port",
			Message: "must be between 1 and 65535, inclusive",
			YAML: `apiVersion: v1
kind: Endpoints
metadata:
  name: db
subsets:
- addresses:
  - ip: 10.244.1.5
  ports:
  - port: 0
`,
		},
		{
			Name:    "endpoints-subset-without-addresses",
			Field:   "subsets[0]",
			Message: "must specify `addresses` or `notReadyAddresses`",
			YAML: `apiVersion: v1
kind: Endpoints
metadata:
  name: db
subsets:
- ports:
  - port: 5432
`,
		},
		{
			Name:    "endpointslice-unknown-address-type",
			Field:   "addressType",
			Message: `Unsupported value: "IP"`,
			YAML: `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: db-abc12
  labels:
    kubernetes.io/service-name: db
addressType: IP
endpoints:
- addresses:
  - 10.244.1.5
ports:
- name: db
  port: 5432
`,
		},
		{
			Name:    "endpointslice-ipv6-in-ipv4-slice",
			Field:   "endpoints[0].addresses[0]",
			Message: "must be a valid IPv4 address",
			YAML: `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: db-abc12
  labels:
    kubernetes.io/service-name: db
addressType: IPv4
endpoints:
- addresses:
  - fd00:10:244::5
ports:
- name: db
  port: 5432
`,
		},
		{
			Name:    "endpointslice-endpoint-without-addresses",
			Field:   "endpoints[0].addresses",
			Message: "must contain at least 1 address",
			YAML: `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: db-abc12
  labels:
    kubernetes.io/service-name: db
addressType: IPv4
endpoints:
- conditions:
    ready: true
ports:
- name: db
  port: 5432
`,
		},
		{
			Name:    "endpointslice-unknown-protocol",
			Field:   "ports[0].protocol",
			Message: `Unsupported value: "HTTP"`,
			YAML: `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: db-abc12
  labels:
    kubernetes.io/service-name: db
addressType: IPv4
endpoints:
- addresses:
  - 10.244.1.5
ports:
- name: db
  port: 5432
  protocol: HTTP
`,
		},
		{
			Name:    "endpointslice-duplicate-port-name",
			Field:   "ports[1].name",
			Message: `Duplicate value: "db"`,
			YAML: `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: db-abc12
  labels:
    kubernetes.io/service-name: db
addressType: IPv4
endpoints:
- addresses:
  - 10.244.1.5
ports:
- name: db
  port: 5432
- name: db
  port: 5433
`,
		},

		// IngressClasses and Nodes.
		{
			Name:    "ingressclass-controller-without-domain",
			Field:   "spec.controller",
			Message: `must be a domain-prefixed path (such as "acme.io/foo")`,
			YAML: `apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: nginx
spec:
  controller: nginx
`,
		},
		{
			Name:    "node-invalid-pod-cidr",
			Field:   "spec.podCIDRs[0]",
			Message: "must be a valid CIDR value",
			YAML: `apiVersion: v1
kind: Node
metadata:
  name: node-1
spec:
  podCIDRs:
  - 10.244.1.0/33
`,
		},
	}
	all = append(all, replicaSetBadManifests()...)
	all = append(all, serviceCIDRBadManifests()...)
	all = append(all, networkPolicyBadManifests()...)
	return append(all, workloadBadManifests()...)
}
