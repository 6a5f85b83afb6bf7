package kubelet

import "strings"

// Kubernetes expands $(VAR) references in a container's env values, command
// and args before the runtime sees them (the kubelet's
// third_party/forked/golang/expansion): $(NAME) becomes the value of NAME when
// it is defined and stays as written when it is not, and $$ is an escaped $
// (so "$$(dig ...)" reaches the shell as "$(dig ...)"). A $ before anything
// else is kept as it is, and so is a "$(" without its closing parenthesis
// (the text after it is still expanded).

// expandVars expands s with lookup.
func expandVars(s string, lookup func(string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch next := s[i+1]; next {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				// Unterminated: "$(" is literal, and what follows is read on.
				b.WriteString("$(")
				i++
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok && name != "" {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// envLookup looks NAME up in a list of NAME=VALUE entries; a later entry wins.
func envLookup(env []string) func(string) (string, bool) {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

// expandArgv expands every element of argv with the container's environment.
func expandArgv(argv []string, lookup func(string) (string, bool)) []string {
	if len(argv) == 0 {
		return argv
	}
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = expandVars(a, lookup)
	}
	return out
}
