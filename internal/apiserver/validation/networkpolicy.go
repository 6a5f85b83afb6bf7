package validation

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	netutils "k8s.io/utils/net"
)

// Network policies follow kubernetes pkg/apis/networking/validation
// (ValidateNetworkPolicy, ValidateNetworkPolicyUpdate) with the feature gates
// of v1.37 at their defaults (StrictIPCIDRValidation on). The enforcer in the
// node agents trusts what passes here: ports in range, named ports that are
// IANA service names, ipBlocks that parse and whose excepts lie strictly
// inside their cidr.

var (
	supportedNetworkPolicyProtocols = []string{string(corev1.ProtocolTCP), string(corev1.ProtocolUDP), string(corev1.ProtocolSCTP)}
	supportedPolicyTypes            = []string{string(networkingv1.PolicyTypeIngress), string(networkingv1.PolicyTypeEgress)}
)

// netpolOptions are upstream's NetworkPolicyValidationOptions: on update,
// what was already stored stays acceptable even where today's rules are
// stricter (an invalid label value in the old podSelector, an old CIDR in a
// form strict CIDR validation now refuses).
type netpolOptions struct {
	selector metavalidation.LabelSelectorValidationOptions
	oldCIDRs []string
}

func validateNetworkPolicy(np, old *networkingv1.NetworkPolicy) field.ErrorList {
	allErrs := validateMeta(&np.ObjectMeta, metaOf(old), true, nameIsSubdomain)
	var opts netpolOptions
	if old != nil {
		if len(metavalidation.ValidateLabelSelector(&old.Spec.PodSelector, opts.selector, nil)) > 0 {
			opts.selector.AllowInvalidLabelValueInSelector = true
		}
		opts.oldCIDRs = ipBlockCIDRs(&old.Spec)
	}
	return append(allErrs, validateNetworkPolicySpec(&np.Spec, opts, specPath)...)
}

// ipBlockCIDRs lists every cidr and except of the policy's ipBlocks.
func ipBlockCIDRs(spec *networkingv1.NetworkPolicySpec) []string {
	var out []string
	add := func(peers []networkingv1.NetworkPolicyPeer) {
		for _, p := range peers {
			if p.IPBlock != nil {
				out = append(out, p.IPBlock.CIDR)
				out = append(out, p.IPBlock.Except...)
			}
		}
	}
	for _, r := range spec.Ingress {
		add(r.From)
	}
	for _, r := range spec.Egress {
		add(r.To)
	}
	return out
}

func validateNetworkPolicySpec(spec *networkingv1.NetworkPolicySpec, opts netpolOptions, fldPath *field.Path) field.ErrorList {
	allErrs := metavalidation.ValidateLabelSelector(&spec.PodSelector, opts.selector, fldPath.Child("podSelector"))
	for i, rule := range spec.Ingress {
		rulePath := fldPath.Child("ingress").Index(i)
		for j := range rule.Ports {
			allErrs = append(allErrs, validateNetworkPolicyPort(&rule.Ports[j], rulePath.Child("ports").Index(j))...)
		}
		for j := range rule.From {
			allErrs = append(allErrs, validateNetworkPolicyPeer(&rule.From[j], opts, rulePath.Child("from").Index(j))...)
		}
	}
	for i, rule := range spec.Egress {
		rulePath := fldPath.Child("egress").Index(i)
		for j := range rule.Ports {
			allErrs = append(allErrs, validateNetworkPolicyPort(&rule.Ports[j], rulePath.Child("ports").Index(j))...)
		}
		for j := range rule.To {
			allErrs = append(allErrs, validateNetworkPolicyPeer(&rule.To[j], opts, rulePath.Child("to").Index(j))...)
		}
	}
	typesPath := fldPath.Child("policyTypes")
	// Upstream checks only the count and the values: ["Ingress", "Ingress"]
	// is accepted (and means Ingress).
	if len(spec.PolicyTypes) > len(supportedPolicyTypes) {
		return append(allErrs, field.Invalid(typesPath, &spec.PolicyTypes, "may not specify more than two policyTypes"))
	}
	for i, t := range spec.PolicyTypes {
		if !slices.Contains(supportedPolicyTypes, string(t)) {
			allErrs = append(allErrs, field.NotSupported(typesPath.Index(i), t, supportedPolicyTypes))
		}
	}
	return allErrs
}

func validateNetworkPolicyPort(port *networkingv1.NetworkPolicyPort, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if p := port.Protocol; p != nil && !slices.Contains(supportedNetworkPolicyProtocols, string(*p)) {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("protocol"), *p, supportedNetworkPolicyProtocols))
	}
	endPath := fldPath.Child("endPort")
	switch {
	case port.Port == nil:
		if port.EndPort != nil {
			allErrs = append(allErrs, field.Invalid(endPath, *port.EndPort, "may not be specified when `port` is not specified"))
		}
	case port.Port.Type == intstr.Int:
		allErrs = append(allErrs, portNum(port.Port.IntVal, fldPath.Child("port"))...)
		if port.EndPort != nil {
			if *port.EndPort < port.Port.IntVal {
				allErrs = append(allErrs, field.Invalid(endPath, *port.EndPort, "must be greater than or equal to `port`"))
			}
			allErrs = append(allErrs, portNum(*port.EndPort, endPath)...)
		}
	default:
		if port.EndPort != nil {
			allErrs = append(allErrs, field.Invalid(endPath, *port.EndPort, "may not be specified when `port` is non-numeric"))
		}
		allErrs = append(allErrs, msgs(fldPath.Child("port"), port.Port.StrVal, validation.IsValidPortName(port.Port.StrVal))...)
	}
	return allErrs
}

// validateNetworkPolicyPeer checks one from/to entry: at least one of
// podSelector, namespaceSelector and ipBlock, and an ipBlock alone.
func validateNetworkPolicyPeer(peer *networkingv1.NetworkPolicyPeer, opts netpolOptions, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	n := 0
	if peer.PodSelector != nil {
		n++
		allErrs = append(allErrs, metavalidation.ValidateLabelSelector(peer.PodSelector, opts.selector, fldPath.Child("podSelector"))...)
	}
	if peer.NamespaceSelector != nil {
		n++
		allErrs = append(allErrs, metavalidation.ValidateLabelSelector(peer.NamespaceSelector, opts.selector, fldPath.Child("namespaceSelector"))...)
	}
	if peer.IPBlock != nil {
		n++
		allErrs = append(allErrs, validateIPBlock(peer.IPBlock, opts, fldPath.Child("ipBlock"))...)
	}
	switch {
	case n == 0:
		allErrs = append(allErrs, field.Required(fldPath, "must specify a peer"))
	case n > 1 && peer.IPBlock != nil:
		allErrs = append(allErrs, field.Forbidden(fldPath, "may not specify both ipBlock and another peer"))
	}
	return allErrs
}

// validateIPBlock checks the cidr and that every except is a strict subset
// of it. A CIDR already stored may keep a form strict validation refuses
// (bits set beyond the prefix length, leading zeros), so containment is
// judged on the masked networks ParseCIDRSloppy gives, as upstream does.
func validateIPBlock(ipb *networkingv1.IPBlock, opts netpolOptions, fldPath *field.Path) field.ErrorList {
	cidrPath := fldPath.Child("cidr")
	if ipb.CIDR == "" {
		return field.ErrorList{field.Required(cidrPath, "")}
	}
	allErrs := validation.IsValidCIDRForLegacyField(cidrPath, ipb.CIDR, true, opts.oldCIDRs)
	_, cidr, err := netutils.ParseCIDRSloppy(ipb.CIDR)
	if err != nil {
		return allErrs
	}
	cidrBits, _ := cidr.Mask.Size()
	for i, s := range ipb.Except {
		exceptPath := fldPath.Child("except").Index(i)
		allErrs = append(allErrs, validation.IsValidCIDRForLegacyField(exceptPath, s, true, opts.oldCIDRs)...)
		_, except, err := netutils.ParseCIDRSloppy(s)
		if err != nil {
			continue
		}
		if exceptBits, _ := except.Mask.Size(); !cidr.Contains(except.IP) || cidrBits >= exceptBits {
			allErrs = append(allErrs, field.Invalid(exceptPath, s, "must be a strict subset of `cidr`"))
		}
	}
	return allErrs
}

// defaultNetworkPolicy is kubernetes pkg/apis/networking/v1/defaults.go:
// ports default to TCP, and a policy without policyTypes is an Ingress
// policy, and an Egress one too if it has egress rules.
func defaultNetworkPolicy(np *networkingv1.NetworkPolicy) {
	for i := range np.Spec.Ingress {
		for j := range np.Spec.Ingress[i].Ports {
			setIfNil(&np.Spec.Ingress[i].Ports[j].Protocol, corev1.ProtocolTCP)
		}
	}
	for i := range np.Spec.Egress {
		for j := range np.Spec.Egress[i].Ports {
			setIfNil(&np.Spec.Egress[i].Ports[j].Protocol, corev1.ProtocolTCP)
		}
	}
	if len(np.Spec.PolicyTypes) == 0 {
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		if len(np.Spec.Egress) != 0 {
			np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
		}
	}
}

// networkPolicyWarnings are upstream's WarningsOnCreate/Update of the
// NetworkPolicy strategy: an ipBlock CIDR that passes validation but is
// not in canonical form (an IPv6 range not as RFC 5952 writes it, or a
// stored legacy value).
func networkPolicyWarnings(np *networkingv1.NetworkPolicy) []string {
	var warnings []string
	add := func(peers []networkingv1.NetworkPolicyPeer, peersPath *field.Path) {
		for j, peer := range peers {
			if peer.IPBlock == nil {
				continue
			}
			p := peersPath.Index(j).Child("ipBlock")
			warnings = append(warnings, cidrWarnings(p.Child("cidr"), peer.IPBlock.CIDR)...)
			for k, except := range peer.IPBlock.Except {
				warnings = append(warnings, cidrWarnings(p.Child("except").Index(k), except)...)
			}
		}
	}
	for i, rule := range np.Spec.Ingress {
		add(rule.From, specPath.Child("ingress").Index(i).Child("from"))
	}
	for i, rule := range np.Spec.Egress {
		add(rule.To, specPath.Child("egress").Index(i).Child("to"))
	}
	return warnings
}

// cidrWarnings is GetWarningsForCIDR for a value that parses (it logs an
// error for one that does not).
func cidrWarnings(fldPath *field.Path, value string) []string {
	if _, _, err := netutils.ParseCIDRSloppy(value); err != nil {
		return nil
	}
	return validation.GetWarningsForCIDR(fldPath, value)
}
