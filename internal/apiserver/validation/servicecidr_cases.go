package validation

// serviceCIDRBadManifests are ServiceCIDRs and IPAddresses Kubernetes rejects.
func serviceCIDRBadManifests() []BadManifest {
	return []BadManifest{
		{
			Name:    "servicecidr-not-canonical",
			Field:   "spec.cidrs[0]",
			Message: "must not have bits set beyond the prefix length",
			YAML: `apiVersion: networking.k8s.io/v1
kind: ServiceCIDR
metadata:
  name: extra
spec:
  cidrs:
  - 10.100.0.1/16
`,
		},
		{
			Name:    "servicecidr-two-of-one-family",
			Field:   "spec.cidrs",
			Message: "may specify no more than one IP for each IP family",
			YAML: `apiVersion: networking.k8s.io/v1
kind: ServiceCIDR
metadata:
  name: extra
spec:
  cidrs:
  - 10.100.0.0/16
  - 10.101.0.0/16
`,
		},
		{
			Name:    "servicecidr-no-cidrs",
			Field:   "spec.cidrs",
			Message: "at least one CIDR required",
			YAML: `apiVersion: networking.k8s.io/v1
kind: ServiceCIDR
metadata:
  name: extra
spec: {}
`,
		},
		{
			Name:    "ipaddress-name-not-canonical",
			Field:   "metadata.name",
			Message: `must be in canonical form ("2001:db8::1")`,
			YAML: `apiVersion: networking.k8s.io/v1
kind: IPAddress
metadata:
  name: 2001:db8:0:0::1
spec:
  parentRef:
    resource: services
    namespace: default
    name: web
`,
		},
		{
			Name:    "ipaddress-name-not-an-ip",
			Field:   "metadata.name",
			Message: "must be a valid IP address",
			YAML: `apiVersion: networking.k8s.io/v1
kind: IPAddress
metadata:
  name: web
spec:
  parentRef:
    resource: services
    namespace: default
    name: web
`,
		},
		{
			Name:    "ipaddress-without-parentref",
			Field:   "spec.parentRef",
			Message: "Required value",
			YAML: `apiVersion: networking.k8s.io/v1
kind: IPAddress
metadata:
  name: 10.96.100.100
spec: {}
`,
		},
		{
			Name:    "ipaddress-parentref-without-resource",
			Field:   "spec.parentRef.resource",
			Message: "Required value",
			YAML: `apiVersion: networking.k8s.io/v1
kind: IPAddress
metadata:
  name: 10.96.100.100
spec:
  parentRef:
    name: web
`,
		},
	}
}
