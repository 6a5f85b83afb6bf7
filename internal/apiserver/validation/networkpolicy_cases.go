package validation

// networkPolicyBadManifests are NetworkPolicies Kubernetes rejects, each with
// the one field error kube-apiserver answers with.
func networkPolicyBadManifests() []BadManifest {
	const head = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: db
spec:
  podSelector:
    matchLabels: {app: db}
`
	return []BadManifest{
		{
			Name:    "netpol-port-out-of-range",
			Field:   "spec.ingress[0].ports[0].port",
			Message: "must be between 1 and 65535, inclusive",
			YAML: head + `  ingress:
  - ports:
    - port: 70000
`,
		},
		{
			Name:    "netpol-named-port-not-iana",
			Field:   "spec.ingress[0].ports[0].port",
			Message: "must contain at least one letter (a-z)",
			YAML: head + `  ingress:
  - ports:
    - port: "6379-"
`,
		},
		{
			Name:    "netpol-endport-below-port",
			Field:   "spec.egress[0].ports[0].endPort",
			Message: "must be greater than or equal to `port`",
			YAML: head + `  egress:
  - ports:
    - port: 32000
      endPort: 31000
`,
		},
		{
			Name:    "netpol-endport-with-named-port",
			Field:   "spec.ingress[0].ports[0].endPort",
			Message: "may not be specified when `port` is non-numeric",
			YAML: head + `  ingress:
  - ports:
    - port: redis
      endPort: 7000
`,
		},
		{
			Name:    "netpol-endport-without-port",
			Field:   "spec.ingress[0].ports[0].endPort",
			Message: "may not be specified when `port` is not specified",
			YAML: head + `  ingress:
  - ports:
    - endPort: 7000
`,
		},
		{
			Name:    "netpol-protocol-lowercase",
			Field:   "spec.ingress[0].ports[0].protocol",
			Message: `Unsupported value: "tcp": supported values: "TCP", "UDP", "SCTP"`,
			YAML: head + `  ingress:
  - ports:
    - port: 6379
      protocol: tcp
`,
		},
		{
			Name:    "netpol-ipblock-bad-cidr",
			Field:   "spec.ingress[0].from[0].ipBlock.cidr",
			Message: "must be a valid CIDR value",
			YAML: head + `  ingress:
  - from:
    - ipBlock:
        cidr: 172.17.0.0
`,
		},
		{
			Name:    "netpol-ipblock-except-outside",
			Field:   "spec.ingress[0].from[0].ipBlock.except[0]",
			Message: "must be a strict subset of `cidr`",
			YAML: head + `  ingress:
  - from:
    - ipBlock:
        cidr: 172.17.0.0/16
        except:
        - 172.18.1.0/24
`,
		},
		{
			Name:    "netpol-ipblock-except-equal",
			Field:   "spec.egress[0].to[0].ipBlock.except[0]",
			Message: "must be a strict subset of `cidr`",
			YAML: head + `  egress:
  - to:
    - ipBlock:
        cidr: 10.0.0.0/24
        except:
        - 10.0.0.0/24
`,
		},
		{
			Name:    "netpol-ipblock-with-selector",
			Field:   "spec.ingress[0].from[0]",
			Message: "may not specify both ipBlock and another peer",
			YAML: head + `  ingress:
  - from:
    - ipBlock:
        cidr: 172.17.0.0/16
      namespaceSelector:
        matchLabels: {project: myproject}
`,
		},
		{
			Name:    "netpol-empty-peer",
			Field:   "spec.egress[0].to[0]",
			Message: "must specify a peer",
			YAML: head + `  egress:
  - to:
    - {}
`,
		},
		{
			Name:    "netpol-bad-namespace-selector",
			Field:   "spec.ingress[0].from[0].namespaceSelector.matchLabels",
			Message: "a valid label must be an empty string or consist of alphanumeric characters",
			YAML: head + `  ingress:
  - from:
    - namespaceSelector:
        matchLabels: {project: "my project"}
`,
		},
		{
			Name:    "netpol-pod-selector-in-without-values",
			Field:   "spec.podSelector.matchExpressions[0].values",
			Message: "must be specified when `operator` is 'In' or 'NotIn'",
			YAML: `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: db
spec:
  podSelector:
    matchExpressions:
    - {key: app, operator: In}
`,
		},
		{
			Name:    "netpol-policy-type-unknown",
			Field:   "spec.policyTypes[1]",
			Message: `Unsupported value: "ingress": supported values: "Ingress", "Egress"`,
			YAML: head + `  policyTypes: [Egress, ingress]
`,
		},
		{
			Name:    "netpol-three-policy-types",
			Field:   "spec.policyTypes",
			Message: "may not specify more than two policyTypes",
			YAML: head + `  policyTypes: [Ingress, Egress, Ingress]
`,
		},
		{
			Name:    "netpol-name-not-subdomain",
			Field:   "metadata.name",
			Message: "a lowercase RFC 1123 subdomain must consist of",
			YAML: `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: Allow_Redis
spec:
  podSelector: {}
`,
		},
	}
}
