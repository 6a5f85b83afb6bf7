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
		l, err := exprText(arg["left"])
		if err != nil {
			return "", err
		}
		r, err := exprText(arg["right"])
		if err != nil {
			return "", err
		}
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
		k, err := exprText(arg["key"])
		if err != nil {
			return "", err
		}
		d, err := exprText(arg["data"])
		if err != nil {
			return "", err
		}
		return k + " vmap " + d, nil
	case "mangle":
		k, err := exprText(arg["key"])
		if err != nil {
			return "", err
		}
		val, err := exprText(arg["value"])
		if err != nil {
			return "", err
		}
		return k + " set " + val, nil
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

func exprText(e any) (string, error) {
	switch x := e.(type) {
	case string:
		return x, nil
	case int64, float64, bool:
		return fmt.Sprint(x), nil
	case []any:
		// A list on the right of "in" (ct state { new, established }).
		var s []string
		for _, y := range x {
			t, err := exprText(y)
			if err != nil {
				return "", err
			}
			s = append(s, t)
		}
		return strings.Join(s, ","), nil
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
			var s []string
			for _, p := range parts {
				t, err := exprText(p)
				if err != nil {
					return "", err
				}
				s = append(s, t)
			}
			return strings.Join(s, " . "), nil
		case "set":
			elems, ok := v.([]any)
			if !ok {
				elems = []any{v}
			}
			var s []string
			for _, el := range elems {
				if pair, ok := el.([]any); ok && len(pair) == 2 {
					k, err := exprText(pair[0])
					if err != nil {
						return "", err
					}
					d, err := exprText(pair[1])
					if err != nil {
						return "", err
					}
					s = append(s, k+" : "+d)
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
			k, err := exprText(arg["key"])
			if err != nil {
				return "", err
			}
			d, err := exprText(arg["data"])
			if err != nil {
				return "", err
			}
			return k + " map " + d, nil
		case "&", "|", "^":
			ops, _ := v.([]any)
			if len(ops) != 2 {
				return "", fmt.Errorf("bad %s expression %v", kind, v)
			}
			a, err := exprText(ops[0])
			if err != nil {
				return "", err
			}
			b, err := exprText(ops[1])
			if err != nil {
				return "", err
			}
			word := map[string]string{"&": "and", "|": "or", "^": "xor"}[kind]
			if n, ok := ops[1].(int64); ok {
				b = fmt.Sprintf("0x%x", n)
			}
			return a + " " + word + " " + b, nil
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
