package validation

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var (
	specPath = field.NewPath("spec")

	supportedServiceTypes = []corev1.ServiceType{
		corev1.ServiceTypeClusterIP, corev1.ServiceTypeExternalName,
		corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeNodePort,
	}
	supportedProtocols       = []corev1.Protocol{corev1.ProtocolSCTP, corev1.ProtocolTCP, corev1.ProtocolUDP}
	supportedAffinities      = []corev1.ServiceAffinity{corev1.ServiceAffinityClientIP, corev1.ServiceAffinityNone}
	supportedExternalPolicy  = []corev1.ServiceExternalTrafficPolicy{corev1.ServiceExternalTrafficPolicyCluster, corev1.ServiceExternalTrafficPolicyLocal}
	supportedInternalPolicy  = []corev1.ServiceInternalTrafficPolicy{corev1.ServiceInternalTrafficPolicyCluster, corev1.ServiceInternalTrafficPolicyLocal}
	supportedIPFamilies      = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	supportedIPFamilyPolicys = []corev1.IPFamilyPolicy{corev1.IPFamilyPolicyPreferDualStack, corev1.IPFamilyPolicyRequireDualStack, corev1.IPFamilyPolicySingleStack}
	supportedDistributions   = []string{corev1.ServiceTrafficDistributionPreferClose, corev1.ServiceTrafficDistributionPreferSameNode, corev1.ServiceTrafficDistributionPreferSameZone}
)

// maxClientIPAffinitySeconds is Kubernetes' MaxClientIPServiceAffinitySeconds.
const maxClientIPAffinitySeconds = 86400

func isHeadless(svc *corev1.Service) bool {
	return svc.Spec.ClusterIP == corev1.ClusterIPNone
}

// externallyAccessible mirrors Kubernetes' service.ExternallyAccessible:
// only these services have an externalTrafficPolicy.
func externallyAccessible(svc *corev1.Service) bool {
	switch svc.Spec.Type {
	case corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeNodePort:
		return true
	case corev1.ServiceTypeClusterIP:
		return len(svc.Spec.ExternalIPs) > 0
	}
	return false
}

func needsClusterIP(svc *corev1.Service) bool {
	return svc.Spec.Type != corev1.ServiceTypeExternalName
}

func needsNodePorts(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer
}

func needsHealthCheck(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer &&
		svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
}

func validateService(svc, old *corev1.Service, cfg Config) field.ErrorList {
	allErrs := validateMeta(&svc.ObjectMeta, metaOf(old), true, nameIsLabel)
	if old != nil {
		allErrs = append(allErrs, validateServiceUpdate(svc, old)...)
	}
	spec := &svc.Spec

	if len(spec.Ports) == 0 && !isHeadless(svc) && spec.Type != corev1.ServiceTypeExternalName {
		allErrs = append(allErrs, field.Required(specPath.Child("ports"), ""))
	}

	switch spec.Type {
	case corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeNodePort:
		if isHeadless(svc) {
			allErrs = append(allErrs, field.Invalid(specPath.Child("clusterIP"), spec.ClusterIP,
				fmt.Sprintf("may not be set to 'None' for %s services", spec.Type)))
		}
	case corev1.ServiceTypeExternalName:
		if spec.ClusterIP != "" {
			allErrs = append(allErrs, field.Forbidden(specPath.Child("clusterIP"), "may not be set for ExternalName services"))
		} else if len(spec.ClusterIPs) > 0 {
			allErrs = append(allErrs, field.Forbidden(specPath.Child("clusterIPs"), "may not be set for ExternalName services"))
		}
		if len(spec.IPFamilies) > 0 {
			allErrs = append(allErrs, field.Forbidden(specPath.Child("ipFamilies"), "may not be set for ExternalName services"))
		}
		if spec.IPFamilyPolicy != nil {
			allErrs = append(allErrs, field.Forbidden(specPath.Child("ipFamilyPolicy"), "may not be set for ExternalName services"))
		}
		// The value is a CNAME target and may be written fully qualified.
		if cname := strings.TrimSuffix(spec.ExternalName, "."); cname != "" {
			allErrs = append(allErrs, dns1123Subdomain(cname, specPath.Child("externalName"))...)
		} else {
			allErrs = append(allErrs, field.Required(specPath.Child("externalName"), ""))
		}
	}

	portsPath := specPath.Child("ports")
	names := map[string]bool{}
	for i := range spec.Ports {
		allErrs = append(allErrs, validateServicePort(&spec.Ports[i], len(spec.Ports) > 1, names, portsPath.Index(i))...)
	}

	if spec.Selector != nil {
		allErrs = append(allErrs, metavalidation.ValidateLabels(spec.Selector, specPath.Child("selector"))...)
	}

	allErrs = append(allErrs, validateSessionAffinity(svc)...)
	allErrs = append(allErrs, validateClusterIPs(svc, old, cfg)...)

	for i, ip := range spec.ExternalIPs {
		p := specPath.Child("externalIPs").Index(i)
		if errs := validation.IsValidIP(p, ip); len(errs) > 0 {
			allErrs = append(allErrs, errs...)
		} else {
			allErrs = append(allErrs, nonSpecialIP(ip, p)...)
		}
	}

	if spec.Type == "" {
		allErrs = append(allErrs, field.Required(specPath.Child("type"), ""))
	} else if !slices.Contains(supportedServiceTypes, spec.Type) {
		allErrs = append(allErrs, field.NotSupported(specPath.Child("type"), spec.Type, supportedServiceTypes))
	}

	allErrs = append(allErrs, validateNodePorts(svc, old, cfg)...)

	// Duplicate (protocol, port) pairs would make two ports indistinguishable
	// to kube-proxy.
	seen := map[string]bool{}
	for i, p := range spec.Ports {
		key := fmt.Sprintf("%d/%s", p.Port, p.Protocol)
		if seen[key] {
			allErrs = append(allErrs, field.Duplicate(portsPath.Index(i), key))
		}
		seen[key] = true
	}

	if len(spec.LoadBalancerSourceRanges) > 0 {
		p := specPath.Child("loadBalancerSourceRanges")
		if spec.Type != corev1.ServiceTypeLoadBalancer {
			allErrs = append(allErrs, field.Forbidden(p, "may only be used when `type` is 'LoadBalancer'"))
		}
		for i, cidr := range spec.LoadBalancerSourceRanges {
			// Kubernetes tolerates space padding here, a leftover of the
			// annotation this field replaced.
			allErrs = append(allErrs, validation.IsValidCIDR(p.Index(i), strings.TrimSpace(cidr))...)
		}
	}

	if spec.AllocateLoadBalancerNodePorts != nil && spec.Type != corev1.ServiceTypeLoadBalancer {
		allErrs = append(allErrs, field.Forbidden(specPath.Child("allocateLoadBalancerNodePorts"), "may only be used when `type` is 'LoadBalancer'"))
	}
	if spec.Type == corev1.ServiceTypeLoadBalancer && spec.AllocateLoadBalancerNodePorts == nil {
		allErrs = append(allErrs, field.Required(specPath.Child("allocateLoadBalancerNodePorts"), ""))
	}

	if spec.LoadBalancerClass != nil {
		if spec.Type != corev1.ServiceTypeLoadBalancer {
			allErrs = append(allErrs, field.Forbidden(specPath.Child("loadBalancerClass"), "may only be used when `type` is 'LoadBalancer'"))
		} else {
			allErrs = append(allErrs, qualifiedName(*spec.LoadBalancerClass, specPath.Child("loadBalancerClass"))...)
		}
	}

	allErrs = append(allErrs, validateTrafficPolicies(svc, old, cfg)...)

	if spec.TrafficDistribution != nil && !slices.Contains(supportedDistributions, *spec.TrafficDistribution) {
		allErrs = append(allErrs, field.NotSupported(specPath.Child("trafficDistribution"), *spec.TrafficDistribution, supportedDistributions))
	}
	return allErrs
}

func validateServicePort(sp *corev1.ServicePort, requireName bool, names map[string]bool, fldPath *field.Path) field.ErrorList {
	allErrs := field.ErrorList{}
	if requireName && sp.Name == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("name"), ""))
	} else if sp.Name != "" {
		allErrs = append(allErrs, dns1123Label(sp.Name, fldPath.Child("name"))...)
		if names[sp.Name] {
			allErrs = append(allErrs, field.Duplicate(fldPath.Child("name"), sp.Name))
		}
		names[sp.Name] = true
	}
	allErrs = append(allErrs, portNum(sp.Port, fldPath.Child("port"))...)
	allErrs = append(allErrs, validateProtocol(sp.Protocol, fldPath.Child("protocol"))...)
	allErrs = append(allErrs, portNumOrName(sp.TargetPort, fldPath.Child("targetPort"))...)
	if sp.AppProtocol != nil {
		allErrs = append(allErrs, qualifiedName(*sp.AppProtocol, fldPath.Child("appProtocol"))...)
	}
	return allErrs
}

func validateProtocol(p corev1.Protocol, fldPath *field.Path) field.ErrorList {
	if p == "" {
		return field.ErrorList{field.Required(fldPath, "")}
	}
	if !slices.Contains(supportedProtocols, p) {
		return field.ErrorList{field.NotSupported(fldPath, p, supportedProtocols)}
	}
	return nil
}

// portNumOrName is Kubernetes' ValidatePortNumOrName: a number in 1..65535
// or an IANA_SVC_NAME naming a container port.
func portNumOrName(port intstr.IntOrString, fldPath *field.Path) field.ErrorList {
	if port.Type == intstr.String {
		return msgs(fldPath, port.StrVal, validation.IsValidPortName(port.StrVal))
	}
	return msgs(fldPath, port.IntValue(), validation.IsValidPortNum(port.IntValue()))
}

func validateSessionAffinity(svc *corev1.Service) field.ErrorList {
	spec := &svc.Spec
	p := specPath.Child("sessionAffinity")
	switch spec.SessionAffinity {
	case "":
		return field.ErrorList{field.Required(p, "")}
	case corev1.ServiceAffinityNone:
		if spec.SessionAffinityConfig != nil {
			return field.ErrorList{field.Forbidden(specPath.Child("sessionAffinityConfig"),
				fmt.Sprintf("must not be set when session affinity is %s", corev1.ServiceAffinityNone))}
		}
		return nil
	case corev1.ServiceAffinityClientIP:
		cp := specPath.Child("sessionAffinityConfig")
		why := fmt.Sprintf("when session affinity type is %s", corev1.ServiceAffinityClientIP)
		switch {
		case spec.SessionAffinityConfig == nil:
			return field.ErrorList{field.Required(cp, why)}
		case spec.SessionAffinityConfig.ClientIP == nil:
			return field.ErrorList{field.Required(cp.Child("clientIP"), why)}
		case spec.SessionAffinityConfig.ClientIP.TimeoutSeconds == nil:
			return field.ErrorList{field.Required(cp.Child("clientIP", "timeoutSeconds"), why)}
		}
		if t := *spec.SessionAffinityConfig.ClientIP.TimeoutSeconds; t <= 0 || t > maxClientIPAffinitySeconds {
			return field.ErrorList{field.Invalid(cp.Child("clientIP", "timeoutSeconds"), t,
				fmt.Sprintf("must be greater than 0 and less than %d", maxClientIPAffinitySeconds))}
		}
		return nil
	}
	return field.ErrorList{field.NotSupported(p, spec.SessionAffinity, supportedAffinities)}
}

// validateClusterIPs checks clusterIP, clusterIPs, ipFamilies and
// ipFamilyPolicy. Errors about the primary IP are reported on
// spec.clusterIP, the field people write; Default keeps clusterIPs[0] in
// step with it.
func validateClusterIPs(svc, old *corev1.Service, cfg Config) field.ErrorList {
	spec := &svc.Spec
	if spec.Type == corev1.ServiceTypeExternalName {
		return nil // all four must be unset; checked by the caller
	}
	allErrs := clusterIPsFields(svc, old)
	if len(allErrs) > 0 {
		return allErrs
	}
	// What the allocator would refuse: families and policies the cluster
	// cannot serve (on a copy: the write itself was defaulted already).
	allErrs = append(allErrs, initIPFamilyFields(svc.DeepCopy(), old, cfg)...)
	for i, ip := range spec.ClusterIPs {
		if ip == corev1.ClusterIPNone || (old != nil && slices.Contains(old.Spec.ClusterIPs, ip)) {
			continue
		}
		addr, err := netip.ParseAddr(ip)
		if err != nil {
			continue
		}
		cidr, ok := cfg.CIDRFor(FamilyOf(ip))
		if !ok || inServiceRange(addr, cidr) ||
			slices.ContainsFunc(cfg.ExtraServiceCIDRs, func(p netip.Prefix) bool { return inServiceRange(addr, p.Masked()) }) {
			continue // a family the cluster lacks is reported above
		}
		p := specPath.Child("clusterIPs").Index(i)
		if i == 0 {
			p = specPath.Child("clusterIP")
		}
		allErrs = append(allErrs, field.Invalid(p, ip, fmt.Sprintf(
			"failed to allocate IP %s: provided IP is not in the valid range. The range of valid IPs is %s", ip, cidr)))
	}
	return allErrs
}

// clusterIPsFields is upstream's ValidateServiceClusterIPsRelatedFields: the
// form of clusterIP, clusterIPs, ipFamilies and ipFamilyPolicy, whatever the
// cluster's families.
func clusterIPsFields(svc, old *corev1.Service) field.ErrorList {
	spec := &svc.Spec
	if spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	allErrs := field.ErrorList{}
	ipPath, ipsPath := specPath.Child("clusterIP"), specPath.Child("clusterIPs")
	famPath, polPath := specPath.Child("ipFamilies"), specPath.Child("ipFamilyPolicy")

	primaryOK := true
	if spec.ClusterIP != "" && spec.ClusterIP != corev1.ClusterIPNone {
		if errs := validation.IsValidIP(ipPath, spec.ClusterIP); len(errs) > 0 {
			allErrs = append(allErrs, errs...)
			primaryOK = false
		}
	}
	if spec.ClusterIP != "" {
		if len(spec.ClusterIPs) == 0 {
			allErrs = append(allErrs, field.Required(ipsPath, ""))
		} else if spec.ClusterIPs[0] != spec.ClusterIP {
			allErrs = append(allErrs, field.Invalid(ipsPath, spec.ClusterIPs, "first value must match `clusterIP`"))
		}
	} else if len(spec.ClusterIPs) != 0 {
		allErrs = append(allErrs, field.Invalid(ipsPath, spec.ClusterIPs, "must be empty when `clusterIP` is not specified"))
	}
	secondaryOK := true
	for i, ip := range spec.ClusterIPs {
		if i == 0 {
			continue // the primary, checked as clusterIP
		}
		if ip == corev1.ClusterIPNone {
			allErrs = append(allErrs, field.Invalid(ipsPath, spec.ClusterIPs, "'None' must be the first and only value"))
			secondaryOK = false
			continue
		}
		if errs := validation.IsValidIP(ipsPath.Index(i), ip); len(errs) > 0 {
			allErrs = append(allErrs, errs...)
			secondaryOK = false
		}
	}
	if len(spec.ClusterIPs) > 2 {
		allErrs = append(allErrs, field.Invalid(ipsPath, spec.ClusterIPs, "may only hold up to 2 values"))
	}
	if len(spec.ClusterIPs) == 2 && primaryOK && secondaryOK && spec.ClusterIPs[0] != corev1.ClusterIPNone {
		a, _ := netip.ParseAddr(spec.ClusterIPs[0])
		b, _ := netip.ParseAddr(spec.ClusterIPs[1])
		if a.Is4() == b.Is4() {
			allErrs = append(allErrs, field.Invalid(ipsPath, spec.ClusterIPs, "may specify no more than one IP for each IP family"))
		}
	}

	seen := map[corev1.IPFamily]bool{}
	for i, fam := range spec.IPFamilies {
		if !slices.Contains(supportedIPFamilies, fam) {
			allErrs = append(allErrs, field.NotSupported(famPath.Index(i), fam, supportedIPFamilies))
		}
		if seen[fam] {
			allErrs = append(allErrs, field.Duplicate(famPath.Index(i), fam))
		}
		seen[fam] = true
	}
	if len(spec.IPFamilies) > 2 {
		allErrs = append(allErrs, field.Invalid(famPath, spec.IPFamilies, "may only hold up to 2 values"))
	}
	if spec.IPFamilyPolicy != nil && !slices.Contains(supportedIPFamilyPolicys, *spec.IPFamilyPolicy) {
		allErrs = append(allErrs, field.NotSupported(polPath, *spec.IPFamilyPolicy, supportedIPFamilyPolicys))
	}

	// Each IP must be of the family listed at the same index.
	if !isHeadless(svc) && primaryOK && secondaryOK {
		for i, ip := range spec.ClusterIPs {
			if i >= len(spec.IPFamilies) || i > 1 {
				break
			}
			addr, err := netip.ParseAddr(ip)
			if err != nil {
				continue
			}
			want := spec.IPFamilies[i]
			if (want == corev1.IPv4Protocol && addr.Is6()) || (want == corev1.IPv6Protocol && addr.Is4()) {
				p := ipsPath.Index(i)
				if i == 0 {
					p = ipPath
				}
				allErrs = append(allErrs, field.Invalid(p, ip, fmt.Sprintf("expected an %s value as indicated by `ipFamilies[%d]`", want, i)))
			}
		}
	}

	return allErrs
}

// inServiceRange reports whether addr is allocatable from cidr; like the
// Kubernetes allocator, the network address and the IPv4 broadcast address
// are not.
func inServiceRange(addr netip.Addr, cidr netip.Prefix) bool {
	if !cidr.Contains(addr) || addr == cidr.Addr() {
		return false
	}
	if addr.Is4() {
		b := cidr.Addr().As4()
		host := 32 - cidr.Bits()
		for i := 3; i >= 0 && host > 0; i-- {
			n := min(host, 8)
			b[i] |= byte(1<<n - 1)
			host -= n
		}
		return addr != netip.AddrFrom4(b)
	}
	return true
}

func validateNodePorts(svc, old *corev1.Service, cfg Config) field.ErrorList {
	allErrs := field.ErrorList{}
	spec := &svc.Spec
	portsPath := specPath.Child("ports")
	oldPorts := map[int32]bool{}
	if old != nil {
		for _, p := range old.Spec.Ports {
			oldPorts[p.NodePort] = true
		}
	}
	seen := map[string]bool{}
	for i, p := range spec.Ports {
		if p.NodePort == 0 {
			continue // allocated by the server
		}
		np := portsPath.Index(i).Child("nodePort")
		if !needsNodePorts(svc) {
			if spec.Type == corev1.ServiceTypeClusterIP || spec.Type == corev1.ServiceTypeExternalName {
				allErrs = append(allErrs, field.Forbidden(np, fmt.Sprintf("may not be used when `type` is '%s'", spec.Type)))
			}
			continue
		}
		key := fmt.Sprintf("%d/%s", p.NodePort, p.Protocol)
		if seen[key] {
			allErrs = append(allErrs, field.Duplicate(np, p.NodePort))
		}
		seen[key] = true
		if !oldPorts[p.NodePort] {
			allErrs = append(allErrs, nodePortInRange(p.NodePort, np, cfg)...)
		}
	}
	return allErrs
}

// nodePortInRange is the port allocator's range check, with its wording.
func nodePortInRange(port int32, fldPath *field.Path, cfg Config) field.ErrorList {
	if port < cfg.NodePortMin || port > cfg.NodePortMax {
		return field.ErrorList{field.Invalid(fldPath, port, fmt.Sprintf(
			"provided port is not in the valid range. The range of valid ports is %d-%d", cfg.NodePortMin, cfg.NodePortMax))}
	}
	return nil
}

func validateTrafficPolicies(svc, old *corev1.Service, cfg Config) field.ErrorList {
	allErrs := field.ErrorList{}
	spec := &svc.Spec
	etp := specPath.Child("externalTrafficPolicy")
	if !externallyAccessible(svc) {
		if spec.ExternalTrafficPolicy != "" {
			allErrs = append(allErrs, field.Invalid(etp, spec.ExternalTrafficPolicy, "may only be set for externally-accessible services"))
		}
	} else if spec.ExternalTrafficPolicy == "" {
		allErrs = append(allErrs, field.Required(etp, ""))
	} else if !slices.Contains(supportedExternalPolicy, spec.ExternalTrafficPolicy) {
		allErrs = append(allErrs, field.NotSupported(etp, spec.ExternalTrafficPolicy, supportedExternalPolicy))
	}

	hc := specPath.Child("healthCheckNodePort")
	if !needsHealthCheck(svc) {
		if spec.HealthCheckNodePort != 0 {
			allErrs = append(allErrs, field.Invalid(hc, spec.HealthCheckNodePort,
				"may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"))
		}
	} else if spec.HealthCheckNodePort != 0 { // 0 asks the server to allocate one
		if errs := portNum(spec.HealthCheckNodePort, hc); len(errs) > 0 {
			allErrs = append(allErrs, errs...)
		} else if old == nil || old.Spec.HealthCheckNodePort != spec.HealthCheckNodePort {
			allErrs = append(allErrs, nodePortInRange(spec.HealthCheckNodePort, hc, cfg)...)
		}
	}

	itp := specPath.Child("internalTrafficPolicy")
	if spec.InternalTrafficPolicy == nil {
		// Not required for ExternalName, for the same historical reason as
		// in Kubernetes.
		if spec.Type == corev1.ServiceTypeNodePort || spec.Type == corev1.ServiceTypeLoadBalancer || spec.Type == corev1.ServiceTypeClusterIP {
			allErrs = append(allErrs, field.Required(itp, ""))
		}
	} else if !slices.Contains(supportedInternalPolicy, *spec.InternalTrafficPolicy) {
		allErrs = append(allErrs, field.NotSupported(itp, *spec.InternalTrafficPolicy, supportedInternalPolicy))
	}
	return allErrs
}

// validateServiceUpdate holds the rules that compare against the stored
// service: allocated addresses and families stay put unless the service
// moves to or from ExternalName.
func validateServiceUpdate(svc, old *corev1.Service) field.ErrorList {
	allErrs := field.ErrorList{}
	if needsClusterIP(svc) && needsClusterIP(old) && !(isHeadless(svc) && isHeadless(old)) && old.Spec.ClusterIP != "" {
		switch svc.Spec.ClusterIP {
		case old.Spec.ClusterIP:
		case "":
			allErrs = append(allErrs, field.Invalid(specPath.Child("clusterIP"), svc.Spec.ClusterIP, "primary clusterIP can not be unset"))
		default:
			allErrs = append(allErrs, field.Invalid(specPath.Child("clusterIP"), svc.Spec.ClusterIP, "may not change once set"))
		}
	}
	if needsClusterIP(svc) && needsClusterIP(old) {
		allErrs = append(allErrs, upgradeDowngradeErrors(svc, old)...)
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer && old.Spec.Type == corev1.ServiceTypeLoadBalancer &&
		!equalPtr(svc.Spec.LoadBalancerClass, old.Spec.LoadBalancerClass) {
		allErrs = append(allErrs, field.Invalid(specPath.Child("loadBalancerClass"), svc.Spec.LoadBalancerClass, "may not change once set"))
	}
	if needsHealthCheck(svc) && needsHealthCheck(old) && svc.Spec.HealthCheckNodePort != 0 &&
		svc.Spec.HealthCheckNodePort != old.Spec.HealthCheckNodePort {
		allErrs = append(allErrs, field.Forbidden(specPath.Child("healthCheckNodePort"), "field is immutable"))
	}
	return allErrs
}

func equalPtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// PrepareForUpdate carries server-owned values from the stored object old
// into the update obj, as Kubernetes' registry strategies do before
// validating an update. Call it after Default and before Validate. Today it
// acts on Services: status is kept; an update that omits the allocated
// clusterIP, clusterIPs, node ports or health-check node port keeps the
// stored ones (so `kubectl replace` of the original manifest works); and
// fields that only applied to the old type (cluster IPs when moving to
// ExternalName, node ports when moving to ClusterIP, ...) are dropped when
// the client left them unchanged. Other kinds are left alone.
func PrepareForUpdate(obj, old runtime.Object) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return
	}
	oldSvc, ok := old.(*corev1.Service)
	if !ok || oldSvc == nil {
		return
	}
	svc.Status = *oldSvc.Status.DeepCopy()
	patchAllocated(svc, oldSvc)
	normalizeClusterIPsOnUpdate(svc, oldSvc)
	dropTypeDependentFields(svc, oldSvc)
}

func patchAllocated(svc, old *corev1.Service) {
	if needsClusterIP(old) && needsClusterIP(svc) {
		if svc.Spec.ClusterIP == "" {
			svc.Spec.ClusterIP = old.Spec.ClusterIP
		}
		if len(svc.Spec.ClusterIPs) == 0 && len(old.Spec.ClusterIPs) > 0 {
			svc.Spec.ClusterIPs = slices.Clone(old.Spec.ClusterIPs)
		}
	}
	if needsNodePorts(old) && needsNodePorts(svc) {
		inNew := map[int32]bool{}
		for _, p := range svc.Spec.Ports {
			inNew[p.NodePort] = true
		}
		byName := map[string]int32{}
		for _, p := range old.Spec.Ports {
			byName[p.Name] = p.NodePort
		}
		for i := range svc.Spec.Ports {
			p := &svc.Spec.Ports[i]
			if p.NodePort == 0 && !inNew[byName[p.Name]] {
				p.NodePort = byName[p.Name]
			}
		}
	}
	if needsHealthCheck(old) && needsHealthCheck(svc) && svc.Spec.HealthCheckNodePort == 0 {
		svc.Spec.HealthCheckNodePort = old.Spec.HealthCheckNodePort
	}
}

func normalizeClusterIPsOnUpdate(svc, old *corev1.Service) {
	if len(old.Spec.ClusterIPs) > 0 && len(svc.Spec.ClusterIPs) == 0 && old.Spec.ClusterIP == svc.Spec.ClusterIP {
		svc.Spec.ClusterIPs = slices.Clone(old.Spec.ClusterIPs)
	}
	if old.Spec.ClusterIP == svc.Spec.ClusterIP {
		return
	}
	same := slices.Equal(old.Spec.ClusterIPs, svc.Spec.ClusterIPs)
	if old.Spec.ClusterIP != "" && svc.Spec.ClusterIP == "" && same {
		svc.Spec.ClusterIPs = nil
	}
	if svc.Spec.ClusterIP != "" && same {
		svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
	}
}

func dropTypeDependentFields(svc, old *corev1.Service) {
	if needsClusterIP(old) && !needsClusterIP(svc) {
		if svc.Spec.ClusterIP == old.Spec.ClusterIP && slices.Equal(svc.Spec.ClusterIPs, old.Spec.ClusterIPs) {
			svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "", nil
		}
		if slices.Equal(svc.Spec.IPFamilies, old.Spec.IPFamilies) {
			svc.Spec.IPFamilies = nil
		}
		if equalPtr(svc.Spec.IPFamilyPolicy, old.Spec.IPFamilyPolicy) {
			svc.Spec.IPFamilyPolicy = nil
		}
	}
	if needsNodePorts(old) && !needsNodePorts(svc) && sameNodePorts(svc, old) {
		for i := range svc.Spec.Ports {
			svc.Spec.Ports[i].NodePort = 0
		}
	}
	if needsHealthCheck(old) && !needsHealthCheck(svc) && svc.Spec.HealthCheckNodePort == old.Spec.HealthCheckNodePort {
		svc.Spec.HealthCheckNodePort = 0
	}
	if old.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		if svc.Spec.AllocateLoadBalancerNodePorts != nil && equalPtr(svc.Spec.AllocateLoadBalancerNodePorts, old.Spec.AllocateLoadBalancerNodePorts) {
			svc.Spec.AllocateLoadBalancerNodePorts = nil
		}
		if equalPtr(svc.Spec.LoadBalancerClass, old.Spec.LoadBalancerClass) {
			svc.Spec.LoadBalancerClass = nil
		}
	}
	if externallyAccessible(old) && !externallyAccessible(svc) && svc.Spec.ExternalTrafficPolicy == old.Spec.ExternalTrafficPolicy {
		svc.Spec.ExternalTrafficPolicy = ""
	}
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		svc.Status.LoadBalancer = corev1.LoadBalancerStatus{}
	}
}

// sameNodePorts reports whether every port of svc kept the node port the
// port at the same index had in old.
func sameNodePorts(svc, old *corev1.Service) bool {
	for i, p := range svc.Spec.Ports {
		if i >= len(old.Spec.Ports) || p.NodePort != old.Spec.Ports[i].NodePort {
			return false
		}
	}
	return true
}
