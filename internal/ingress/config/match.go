package config

import (
	"regexp"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
)

// Match returns the location serving path, a request's URL path without its query
// (normalised with CleanPath). It never returns nil: the root location answers
// what no path matches.
func (s *Server) Match(path string) *Location {
	if s.UseRegex {
		return s.matchRegex(path)
	}
	// Locations are sorted longest first, Exact before Prefix on equal length, so
	// the first that matches is the one the spec picks.
	for _, l := range s.Locations {
		if l.matches(path) {
			return l
		}
	}
	return s.Root
}

func (l *Location) matches(path string) bool {
	if l.PathType == networkingv1.PathTypeExact {
		return path == l.Path
	}
	return prefixMatch(l.norm, path)
}

// prefixMatch is the element-wise Prefix rule: norm ("/foo", never with a trailing
// slash except "/") matches "/foo", "/foo/" and "/foo/bar" but not "/foobar".
func prefixMatch(norm, path string) bool {
	if norm == "/" {
		return true
	}
	return strings.HasPrefix(path, norm) && (len(path) == len(norm) || path[len(norm)] == '/')
}

// matchRegex is nginx's order for a host in regex mode: exact locations first,
// then the regex locations in order (longest path first), first match wins.
func (s *Server) matchRegex(path string) *Location {
	for _, l := range s.Locations {
		if l.PathType == networkingv1.PathTypeExact && path == l.Path {
			return l
		}
	}
	for _, l := range s.Locations {
		if l.PathType != networkingv1.PathTypeExact && l.regex.MatchString(path) {
			return l
		}
	}
	return s.Root
}

// Rewrite returns the path to send upstream for a request path: the path itself,
// or, with a rewrite-target, the target with the capture groups of the location's
// path (as nginx's `rewrite "(?i)PATH" TARGET break;`).
func (l *Location) Rewrite(path string) string {
	if l.RewriteTarget == "" || l.rewrite.re == nil {
		return path
	}
	m := l.rewrite.re.FindStringSubmatchIndex(path)
	if m == nil {
		return path
	}
	return string(l.rewrite.re.ExpandString(nil, l.rewrite.template, path, m))
}

// regexpMatcher is a compiled location regex (nil when the location is literal).
type regexpMatcher struct {
	re       *regexp.Regexp
	template string // RewriteTarget in Go's $-syntax
}

func (m regexpMatcher) MatchString(s string) bool { return m.re != nil && m.re.MatchString(s) }

// goTemplate turns nginx's "$1abc" into Go's "${1}abc".
func goTemplate(target string) string {
	var b strings.Builder
	for i := 0; i < len(target); i++ {
		c := target[i]
		if c == '$' && i+1 < len(target) && target[i+1] >= '0' && target[i+1] <= '9' {
			j := i + 1
			for j < len(target) && target[j] >= '0' && target[j] <= '9' {
				j++
			}
			b.WriteString("${" + target[i+1:j] + "}")
			i = j - 1
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// CleanPath normalises a request path for matching as nginx does for $uri:
// percent-escapes decoded, "//" merged, "." and ".." resolved. It reports false
// when ".." would climb above the root or an escape is malformed (nginx answers
// 400). Paths that need nothing are returned as they are, without allocating.
func CleanPath(p string) (string, bool) {
	if p == "" {
		return "/", true
	}
	if !needsCleaning(p) {
		return p, true
	}
	dec := make([]byte, 0, len(p))
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '%' {
			if i+2 >= len(p) || !IsHex(p[i+1]) || !IsHex(p[i+2]) {
				return "", false
			}
			c = Unhex(p[i+1])<<4 | Unhex(p[i+2])
			i += 2
			if c == 0 {
				return "", false
			}
		}
		dec = append(dec, c)
	}
	segs := make([]string, 0, 8)
	s := string(dec)
	trailing := strings.HasSuffix(s, "/") || strings.HasSuffix(s, "/.") || strings.HasSuffix(s, "/..")
	for _, seg := range strings.Split(s, "/") {
		switch seg {
		case "", ".":
		case "..":
			if len(segs) == 0 {
				return "", false
			}
			segs = segs[:len(segs)-1]
		default:
			segs = append(segs, seg)
		}
	}
	out := "/" + strings.Join(segs, "/")
	if trailing && out != "/" {
		out += "/"
	}
	return out, true
}

func needsCleaning(p string) bool {
	if p[0] != '/' {
		return true
	}
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '%':
			return true
		case '/':
			if i+1 < len(p) && (p[i+1] == '/' || p[i+1] == '.') {
				return true
			}
		}
	}
	return false
}

// IsHex reports whether c is a hexadecimal digit (for percent-decoding here and
// chunk sizes in the proxy's HTTP/1.1 parser).
func IsHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// Unhex is the value of the hexadecimal digit c (IsHex(c) must hold).
func Unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}
