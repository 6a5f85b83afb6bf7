package nftsim

import (
	"fmt"
	"sort"
	"strings"
)

// ruleText prints a rule's statements in nft syntax, as `nft list` shows
// them. It knows exactly the statements the walker evaluates, so a rule it
// cannot print is one the walker could not walk: Parse fails on it.
func ruleText(stmts []any) (string, error) {
	var parts []string
	for _, s := range stmts {
		t, err := stmtText(s)
		if err != nil {
			return "", err
		}
		parts = append(parts, t)
	}
	return strings.Join(parts, " "), nil
}

func one(m map[string]any) (string, any, error) {
	if len(m) != 1 {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return "", nil, fmt.Errorf("expected one key, got %v", keys)
	}
	for k, v := range m {
		return k, v, nil
	}
	return "", nil, nil
}

func stmtText(s any) (string, error) {
	m, ok := s.(map[string]any)
	if !ok {
		return "", fmt.Errorf("statement %v is not an object", s)
	}
	kind, v, err := one(m)
	if err != nil {
		return "", fmt.Errorf("statement: %w", err)
	}
	arg, _ := v.(map[string]any)
	switch kind {
	case "match":
		t, err := exprTexts(arg["left"], arg["right"])
		if err != nil {
			return "", err
		}
		l, r := t[0], t[1]
		switch op, _ := arg["op"].(string); op {
		case "==", "in":
			return l + " " + r, nil
		case "!=", "<", ">", "<=", ">=":
			return l + " " + op + " " + r, nil
		default:
			return "", fmt.Errorf("unsupported match operator %q", op)
		}
	case "jump", "goto":
		return kind + " " + str(arg["target"]), nil
	case "accept", "drop", "return", "continue":
		return kind, nil
	case "reject":
		if arg == nil {
			return "reject", nil
		}
		t, _ := arg["type"].(string)
		e, _ := arg["expr"].(string)
		if (t == "icmp" || t == "") && (e == "port-unreachable" || e == "") {
			return "reject", nil
		}
		return strings.TrimSpace("reject with " + t + " " + e), nil
	case "counter":
		if name, ok := v.(string); ok {
			return fmt.Sprintf("counter name %q", name), nil
		}
		if arg == nil {
			return "counter", nil
		}
		return fmt.Sprintf("counter packets %v bytes %v", arg["packets"], arg["bytes"]), nil
	case "vmap":
		t, err := exprTexts(arg["key"], arg["data"])
		if err != nil {
			return "", err
		}
		return t[0] + " vmap " + t[1], nil
	case "mangle":
		t, err := exprTexts(arg["key"], arg["value"])
		if err != nil {
			return "", err
		}
		return t[0] + " set " + t[1], nil
	case "dnat", "snat":
		t := kind + " to "
		if f, ok := arg["family"].(string); ok {
			if _, isMap := arg["addr"].(map[string]any); isMap {
				t = kind + " " + f + " addr . port to "
			}
		}
		a, err := exprText(arg["addr"])
		if err != nil {
			return "", err
		}
		t += a
		if p, ok := arg["port"]; ok {
			ps, err := exprText(p)
			if err != nil {
				return "", err
			}
			t += ":" + ps
		}
		return t, nil
	case "masquerade":
		t := "masquerade"
		if arg != nil {
			t += " " + flagsText(arg["flags"])
		}
		return strings.TrimSpace(t), nil
	case "set":
		e, err := exprText(arg["elem"])
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s %s { %s }", str(arg["op"]), str(arg["set"]), e), nil
	case "log":
		return "log", nil
	}
	return "", fmt.Errorf("unsupported statement %q", kind)
}

func flagsText(f any) string {
	switch x := f.(type) {
	case string:
		return x
	case []any:
		var s []string
		for _, e := range x {
			s = append(s, str(e))
		}
		return strings.Join(s, ",")
	}
	return ""
}

func str(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}

// exprTexts is exprText of each of es, in order; the first error ends it.
func exprTexts(es ...any) ([]string, error) {
	out := make([]string, 0, len(es))
	for _, e := range es {
		t, err := exprText(e)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

func exprText(e any) (string, error) {
	switch x := e.(type) {
	case string:
		return x, nil
	case int64, float64, bool:
		return fmt.Sprint(x), nil
	case []any:
		// A list on the right of "in" (ct state { new, established }).
		s, err := exprTexts(x...)
		return strings.Join(s, ","), err
	case map[string]any:
		kind, v, err := one(x)
		if err != nil {
			return "", fmt.Errorf("expression: %w", err)
		}
		arg, _ := v.(map[string]any)
		switch kind {
		case "payload":
			return str(arg["protocol"]) + " " + str(arg["field"]), nil
		case "meta":
			if k := str(arg["key"]); k == "mark" {
				// As kube-proxy writes it (nft accepts both).
				return "mark", nil
			}
			return "meta " + str(arg["key"]), nil
		case "ct":
			return "ct " + str(arg["key"]), nil
		case "fib":
			return "fib " + strings.ReplaceAll(flagsText(arg["flags"]), ",", " . ") + " " + str(arg["result"]), nil
		case "numgen":
			t := fmt.Sprintf("numgen %s mod %v", str(arg["mode"]), arg["mod"])
			if off, ok := arg["offset"].(int64); ok && off != 0 {
				t += fmt.Sprintf(" offset %d", off)
			}
			return t, nil
		case "prefix":
			return fmt.Sprintf("%s/%v", str(arg["addr"]), arg["len"]), nil
		case "range":
			r, _ := v.([]any)
			if len(r) != 2 {
				return "", fmt.Errorf("bad range %v", v)
			}
			a, _ := exprText(r[0])
			b, _ := exprText(r[1])
			return a + "-" + b, nil
		case "concat":
			parts, _ := v.([]any)
			s, err := exprTexts(parts...)
			return strings.Join(s, " . "), err
		case "set":
			elems, ok := v.([]any)
			if !ok {
				elems = []any{v}
			}
			var s []string
			for _, el := range elems {
				if pair, ok := el.([]any); ok && len(pair) == 2 {
					t, err := exprTexts(pair...)
					if err != nil {
						return "", err
					}
					s = append(s, t[0]+" : "+t[1])
					continue
				}
				t, err := exprText(el)
				if err != nil {
					return "", err
				}
				s = append(s, t)
			}
			return "{ " + strings.Join(s, ", ") + " }", nil
		case "map":
			t, err := exprTexts(arg["key"], arg["data"])
			if err != nil {
				return "", err
			}
			return t[0] + " map " + t[1], nil
		case "&", "|", "^":
			ops, _ := v.([]any)
			if len(ops) != 2 {
				return "", fmt.Errorf("bad %s expression %v", kind, v)
			}
			t, err := exprTexts(ops...)
			if err != nil {
				return "", err
			}
			word := map[string]string{"&": "and", "|": "or", "^": "xor"}[kind]
			if n, ok := ops[1].(int64); ok {
				t[1] = fmt.Sprintf("0x%x", n)
			}
			return t[0] + " " + word + " " + t[1], nil
		case "jump", "goto":
			return kind + " " + str(arg["target"]), nil
		case "accept", "drop", "return", "continue":
			return kind, nil
		case "elem":
			return exprText(arg["val"])
		}
		return "", fmt.Errorf("unsupported expression %q", kind)
	}
	return "", fmt.Errorf("unsupported expression %v", e)
}
