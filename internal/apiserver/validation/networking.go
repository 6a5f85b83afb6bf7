package validation

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/minikit/minikit/internal/annotations"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var (
	supportedPathTypes = []networkingv1.PathType{networkingv1.PathTypeExact, networkingv1.PathTypeImplementationSpecific, networkingv1.PathTypePrefix}
	supportedScopes    = []string{networkingv1.IngressClassParametersReferenceScopeCluster, networkingv1.IngressClassParametersReferenceScopeNamespace}

	// Path pieces that would let a request escape the prefix it matched.
	invalidPathSequences = []string{"//", "/./", "/../", "%2f", "%2F"}
	invalidPathSuffixes  = []string{"/..", "/."}
)

const (
	ingressClassAnnotation       = annotations.IngressClass
	maxLenIngressClassController = 250
)

// validateIngress follows kubernetes pkg/apis/networking/validation for
// networking.k8s.io/v1.
func validateIngress(ing, old *networkingv1.Ingress) field.ErrorList {
	allErrs := validateMeta(&ing.ObjectMeta, metaOf(old), true, nameIsSubdomain)
	spec := &ing.Spec
	if len(spec.Rules) == 0 && spec.DefaultBackend == nil {
		allErrs = append(allErrs, field.Invalid(specPath, spec.Rules, "either `defaultBackend` or `rules` must be specified"))
	}
	if spec.DefaultBackend != nil {
		allErrs = append(allErrs, validateIngressBackend(spec.DefaultBackend, specPath.Child("defaultBackend"))...)
	}
	rules := specPath.Child("rules")
	for i, r := range spec.Rules {
		p := rules.Index(i)
		if r.Host != "" {
			allErrs = append(allErrs, validateIngressHost(r.Host, p.Child("host"))...)
		}
		if r.HTTP == nil {
			continue
		}
		paths := p.Child("http", "paths")
		if len(r.HTTP.Paths) == 0 {
			allErrs = append(allErrs, field.Required(paths, ""))
		}
		for j := range r.HTTP.Paths {
			allErrs = append(allErrs, validateIngressPath(&r.HTTP.Paths[j], paths.Index(j))...)
		}
	}
	tls := specPath.Child("tls")
	for i, t := range spec.TLS {
		for j, h := range t.Hosts {
			hp := tls.Index(i).Child("hosts").Index(j)
			if strings.Contains(h, "*") {
				allErrs = append(allErrs, msgs(hp, h, validation.IsWildcardDNS1123Subdomain(h))...)
			} else {
				allErrs = append(allErrs, msgs(hp, h, validation.IsDNS1123Subdomain(h))...)
			}
		}
		if t.SecretName != "" {
			allErrs = append(allErrs, msgs(tls.Index(i).Child("secretName"), t.SecretName, nameIsSubdomain(t.SecretName, false))...)
		}
	}
	allErrs = append(allErrs, validateRewriteTarget(ing.Annotations)...)
	if spec.IngressClassName != nil {
		allErrs = append(allErrs, msgs(specPath.Child("ingressClassName"), *spec.IngressClassName, nameIsSubdomain(*spec.IngressClassName, false))...)
		if a, ok := ing.Annotations[ingressClassAnnotation]; ok && a != *spec.IngressClassName {
			allErrs = append(allErrs, field.Invalid(metaPath.Child("annotations").Key(ingressClassAnnotation), a, "must match `ingressClassName` when both are specified"))
		}
	}
	return allErrs
}

// validateIngressHost accepts a DNS name, optionally with one leading
// wildcard label ("*.example.com"), and never an IP address.
func validateIngressHost(host string, fldPath *field.Path) field.ErrorList {
	allErrs := field.ErrorList{}
	if _, err := netip.ParseAddr(host); err == nil {
		allErrs = append(allErrs, field.Invalid(fldPath, host, "must be a DNS name, not an IP address"))
	}
	if strings.Contains(host, "*") {
		return append(allErrs, msgs(fldPath, host, validation.IsWildcardDNS1123Subdomain(host))...)
	}
	return append(allErrs, msgs(fldPath, host, validation.IsDNS1123Subdomain(host))...)
}

func validateIngressPath(path *networkingv1.HTTPIngressPath, fldPath *field.Path) field.ErrorList {
	allErrs := field.ErrorList{}
	if path.PathType == nil {
		return append(allErrs, field.Required(fldPath.Child("pathType"), "pathType must be specified"))
	}
	pp := fldPath.Child("path")
	if i := strings.IndexFunc(path.Path, isControl); i >= 0 {
		// No request path can carry one, and a newline would end the comment
		// lines of the rendered nginx.conf that show the path.
		allErrs = append(allErrs, field.Invalid(pp, path.Path, fmt.Sprintf("must not contain control characters (found %q at byte %d)", path.Path[i], i)))
	}
	switch *path.PathType {
	case networkingv1.PathTypeExact, networkingv1.PathTypePrefix:
		if !strings.HasPrefix(path.Path, "/") {
			allErrs = append(allErrs, field.Invalid(pp, path.Path, "must be an absolute path"))
		}
		for _, seq := range invalidPathSequences {
			if strings.Contains(path.Path, seq) {
				allErrs = append(allErrs, field.Invalid(pp, path.Path, fmt.Sprintf("must not contain '%s'", seq)))
			}
		}
		for _, suf := range invalidPathSuffixes {
			if strings.HasSuffix(path.Path, suf) {
				allErrs = append(allErrs, field.Invalid(pp, path.Path, fmt.Sprintf("cannot end with '%s'", suf)))
			}
		}
	case networkingv1.PathTypeImplementationSpecific:
		if path.Path != "" && !strings.HasPrefix(path.Path, "/") {
			allErrs = append(allErrs, field.Invalid(pp, path.Path, "must be an absolute path"))
		}
	default:
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("pathType"), *path.PathType, supportedPathTypes))
	}
	return append(allErrs, validateIngressBackend(&path.Backend, fldPath.Child("backend"))...)
}

func validateIngressBackend(b *networkingv1.IngressBackend, fldPath *field.Path) field.ErrorList {
	allErrs := field.ErrorList{}
	switch {
	case b.Resource != nil && b.Service != nil:
		return append(allErrs, field.Invalid(fldPath, "", "cannot set both resource and service backends"))
	case b.Resource != nil:
		r := b.Resource
		allErrs = append(allErrs, validateTypedReference(r.APIGroup, r.Kind, r.Name, fldPath.Child("resource"))...)
	case b.Service != nil:
		sp := fldPath.Child("service")
		if b.Service.Name == "" {
			allErrs = append(allErrs, field.Required(sp.Child("name"), ""))
		} else {
			// Services may be named by DNS-1123 labels, see nameIsLabel.
			allErrs = append(allErrs, msgs(sp.Child("name"), b.Service.Name, nameIsLabel(b.Service.Name, false))...)
		}
		port := b.Service.Port
		switch {
		case port.Name != "" && port.Number != 0:
			allErrs = append(allErrs, field.Invalid(fldPath, "", "cannot set both port name & port number"))
		case port.Name != "":
			allErrs = append(allErrs, msgs(sp.Child("port", "name"), port.Name, validation.IsValidPortName(port.Name))...)
		case port.Number != 0:
			allErrs = append(allErrs, portNum(port.Number, sp.Child("port", "number"))...)
		default:
			allErrs = append(allErrs, field.Required(fldPath, "port name or number is required"))
		}
	default:
		allErrs = append(allErrs, field.Invalid(fldPath, "", "resource or service backend is required"))
	}
	return allErrs
}

func validateTypedReference(apiGroup *string, kind, name string, fldPath *field.Path) field.ErrorList {
	allErrs := field.ErrorList{}
	if apiGroup != nil {
		allErrs = append(allErrs, dns1123Subdomain(*apiGroup, fldPath.Child("apiGroup"))...)
	}
	if kind == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("kind"), "kind is required"))
	} else {
		allErrs = append(allErrs, msgs(fldPath.Child("kind"), kind, content.IsPathSegmentName(kind))...)
	}
	if name == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("name"), "name is required"))
	} else {
		allErrs = append(allErrs, msgs(fldPath.Child("name"), name, content.IsPathSegmentName(name))...)
	}
	return allErrs
}

func validateIngressClass(ic, old *networkingv1.IngressClass) field.ErrorList {
	allErrs := validateMeta(&ic.ObjectMeta, metaOf(old), false, nameIsSubdomain)
	cp := specPath.Child("controller")
	if len(ic.Spec.Controller) > maxLenIngressClassController {
		allErrs = append(allErrs, field.TooLong(cp, ic.Spec.Controller, maxLenIngressClassController))
	}
	allErrs = append(allErrs, validation.IsDomainPrefixedPath(cp, ic.Spec.Controller)...)
	if params := ic.Spec.Parameters; params != nil {
		pp := specPath.Child("parameters")
		allErrs = append(allErrs, validateTypedReference(params.APIGroup, params.Kind, params.Name, pp)...)
		switch {
		case params.Scope == nil:
			allErrs = append(allErrs, field.Required(pp.Child("scope"), ""))
		case !slices.Contains(supportedScopes, *params.Scope):
			allErrs = append(allErrs, field.NotSupported(pp.Child("scope"), *params.Scope, supportedScopes))
		case *params.Scope == networkingv1.IngressClassParametersReferenceScopeNamespace:
			if params.Namespace == nil {
				allErrs = append(allErrs, field.Required(pp.Child("namespace"), "`parameters.scope` is set to 'Namespace'"))
			} else {
				allErrs = append(allErrs, msgs(pp.Child("namespace"), *params.Namespace, nameIsLabel(*params.Namespace, false))...)
			}
		case params.Namespace != nil:
			allErrs = append(allErrs, field.Forbidden(pp.Child("namespace"), "`parameters.scope` is set to 'Cluster'"))
		}
	}
	if old != nil {
		allErrs = append(allErrs, immutable(ic.Spec.Controller, old.Spec.Controller, cp)...)
	}
	return allErrs
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// validateRewriteTarget checks ingress-nginx's rewrite-target annotation. Its
// value is written unquoted into the rewrite directive of the nginx.conf the
// Ingress controller renders (ingress/nginxconf), so it is held to URL path
// characters plus nginx's $N capture references, as ingress-nginx's own
// annotation validation does: a quote, space, ';', '{' or '}' could end the
// directive.
func validateRewriteTarget(ann map[string]string) field.ErrorList {
	v, ok := ann[annotations.RewriteTarget]
	if !ok {
		return nil
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(rewriteTargetPunct, c) >= 0 {
			continue
		}
		return field.ErrorList{field.Invalid(metaPath.Child("annotations").Key(annotations.RewriteTarget), v,
			fmt.Sprintf("must be a URL path with $1-style capture references, of letters, digits and %q only (found %q)", rewriteTargetPunct, c))}
	}
	return nil
}

const rewriteTargetPunct = "/$._~:%?&=+@!,-"
