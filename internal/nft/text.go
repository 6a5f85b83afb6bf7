package nft

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// This file renders objects and operations as `nft -f` text: the Fake's Dump
// and the Exec backend's input share it, so a golden file written from the
// Fake is exactly what the Exec backend would load.

func quote(s string) string { return `"` + s + `"` }

func checkComment(what, c string) error {
	if strings.ContainsAny(c, "\"\n\\") || len(c) > 128 {
		return fmt.Errorf("%s: invalid comment %q (no quotes, backslashes or newlines, at most 128 bytes)", what, c)
	}
	return nil
}

func tableText(t *Table) string {
	s := fmt.Sprintf("table %s %s", t.Family, t.Name)
	return s
}

func renderTable(t *Table) string {
	if t.Comment != "" {
		return fmt.Sprintf("add %s { comment %s ; }", tableText(t), quote(t.Comment))
	}
	return "add " + tableText(t)
}

func renderChain(fam Family, table string, c *Chain) string {
	s := fmt.Sprintf("add chain %s %s %s", fam, table, c.Name)
	var parts []string
	if c.Hook != "" {
		parts = append(parts, fmt.Sprintf("type %s hook %s priority %d ;", c.Type, c.Hook, c.Priority))
	}
	if c.Comment != "" {
		parts = append(parts, fmt.Sprintf("comment %s ;", quote(c.Comment)))
	}
	if len(parts) > 0 {
		s += " { " + strings.Join(parts, " ") + " }"
	}
	return s
}

func renderSetLike(kind string, fam Family, table, name, typ string, flags []string, timeout time.Duration, comment string) string {
	parts := []string{fmt.Sprintf("type %s ;", typ)}
	if strings.HasPrefix(typ, "typeof ") {
		parts[0] = typ + " ;"
	}
	if len(flags) > 0 {
		parts = append(parts, fmt.Sprintf("flags %s ;", strings.Join(flags, ",")))
	}
	if timeout > 0 {
		parts = append(parts, fmt.Sprintf("timeout %ds ;", int64(timeout/time.Second)))
	}
	if comment != "" {
		parts = append(parts, fmt.Sprintf("comment %s ;", quote(comment)))
	}
	return fmt.Sprintf("add %s %s %s %s { %s }", kind, fam, table, name, strings.Join(parts, " "))
}

func renderSet(fam Family, table string, s *Set) string {
	return renderSetLike("set", fam, table, s.Name, s.Type, s.Flags, s.Timeout, s.Comment)
}

func renderMap(fam Family, table string, m *Map) string {
	return renderSetLike("map", fam, table, m.Name, m.Type, m.Flags, 0, m.Comment)
}

func renderRule(fam Family, table string, r *Rule) string {
	s := fmt.Sprintf("add rule %s %s %s %s", fam, table, r.Chain, r.Rule)
	if r.Comment != "" {
		s += " comment " + quote(r.Comment)
	}
	return s
}

// elementText is an element as it appears between the braces of
// `add element`: key, comment, then ": value" for maps.
func elementText(e *Element, withValue bool) string {
	s := strings.Join(e.Key, " . ")
	if e.Comment != "" && withValue {
		s += " comment " + quote(e.Comment)
	}
	if withValue && e.Value != "" {
		s += " : " + e.Value
	}
	return s
}

func renderElement(verb string, fam Family, table string, e *Element) string {
	return fmt.Sprintf("%s element %s %s %s { %s }", verb, fam, table, e.Set, elementText(e, verb == "add"))
}

// renderOp renders one operation of a transaction for `nft -f`. Rules can
// only be added (the model has no rule handles).
func renderOp(fam Family, table string, o *Op) (string, error) {
	switch o.Kind {
	case OpAdd:
		switch {
		case o.Table != nil:
			return renderTable(&Table{Family: fam, Name: table, Comment: o.Table.Comment}), nil
		case o.Chain != nil:
			return renderChain(fam, table, o.Chain), nil
		case o.Rule != nil:
			return renderRule(fam, table, o.Rule), nil
		case o.Set != nil:
			return renderSet(fam, table, o.Set), nil
		case o.Map != nil:
			return renderMap(fam, table, o.Map), nil
		case o.Element != nil:
			return renderElement("add", fam, table, o.Element), nil
		}
	case OpFlush, OpDelete:
		verb := "flush"
		if o.Kind == OpDelete {
			verb = "delete"
		}
		switch {
		case o.Table != nil:
			return fmt.Sprintf("%s table %s %s", verb, fam, table), nil
		case o.Chain != nil:
			return fmt.Sprintf("%s chain %s %s %s", verb, fam, table, o.Chain.Name), nil
		case o.Set != nil:
			return fmt.Sprintf("%s set %s %s %s", verb, fam, table, o.Set.Name), nil
		case o.Map != nil:
			return fmt.Sprintf("%s map %s %s %s", verb, fam, table, o.Map.Name), nil
		case o.Element != nil && o.Kind == OpDelete:
			return renderElement("delete", fam, table, o.Element), nil
		case o.Rule != nil:
			return "", fmt.Errorf("%s of rule %q in chain %q: rules can only be added (flush their chain instead)", verb, o.Rule.Rule, o.Rule.Chain)
		case o.Element != nil:
			return "", fmt.Errorf("flush of element %v of %q: elements can only be added or deleted", o.Element.Key, o.Element.Set)
		}
	}
	return "", fmt.Errorf("invalid operation %+v", *o)
}

// RenderTransaction renders tx as `nft -f` input for the table fam/table.
func RenderTransaction(fam Family, table string, tx *Transaction) (string, error) {
	var b strings.Builder
	for i := range tx.Ops {
		line, err := renderOp(fam, table, &tx.Ops[i])
		if err != nil {
			return "", err
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String(), nil
}

// ParseDump reads `nft -f` text in the form Dump and RenderTransaction write
// (one command per line: add/flush/delete of table, chain, set, map, rule,
// element) back into a Transaction, so golden files can be replayed through
// any backend.
func ParseDump(text string) (*Transaction, error) {
	tx := &Transaction{}
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := parseDumpLine(tx, line); err != nil {
			return nil, fmt.Errorf("line %d %q: %w", n+1, line, err)
		}
	}
	return tx, nil
}

// trailingComment splits `... comment "x"` off the end of s.
func trailingComment(s string) (string, string) {
	if !strings.HasSuffix(s, `"`) {
		return s, ""
	}
	i := strings.LastIndex(s, ` comment "`)
	if i < 0 {
		return s, ""
	}
	return s[:i], s[i+len(` comment "`) : len(s)-1]
}

// blockProps parses `{ type x ; flags a,b ; timeout 3s ; comment "c" ; }`.
func blockProps(s string) (map[string]string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return map[string]string{}, nil
	}
	if !strings.HasPrefix(s, "{") || !strings.HasSuffix(s, "}") {
		return nil, fmt.Errorf("expected { ... }")
	}
	props := map[string]string{}
	for _, part := range strings.Split(s[1:len(s)-1], ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, " ")
		if k == "type" && strings.Contains(v, " hook ") {
			// chain: type T hook H priority P
			f := strings.Fields(v)
			if len(f) != 5 || f[1] != "hook" || f[3] != "priority" {
				return nil, fmt.Errorf("invalid chain spec %q", v)
			}
			props["chaintype"], props["hook"], props["priority"] = f[0], f[2], f[4]
			continue
		}
		if k == "typeof" {
			props["type"] = part
			continue
		}
		props[k] = strings.Trim(v, `"`)
	}
	return props, nil
}

func parseDumpLine(tx *Transaction, line string) error {
	f := strings.SplitN(line, " ", 5)
	if len(f) < 4 {
		return fmt.Errorf("too short")
	}
	verb, kind, fam, table := f[0], f[1], Family(f[2]), f[3]
	rest := ""
	if len(f) == 5 {
		rest = f[4]
	}
	if kind == "table" {
		// "add table ip kube-proxy { comment ... }": f[3] is the name.
		props, err := blockProps(rest)
		if err != nil {
			return err
		}
		t := &Table{Family: fam, Name: table, Comment: props["comment"]}
		return addOp(tx, verb, t)
	}
	name, body, _ := strings.Cut(rest, " ")
	switch kind {
	case "chain":
		props, err := blockProps(body)
		if err != nil {
			return err
		}
		c := &Chain{Name: name, Type: props["chaintype"], Hook: props["hook"], Comment: props["comment"]}
		if p := props["priority"]; p != "" {
			v, err := strconv.Atoi(p)
			if err != nil {
				return fmt.Errorf("invalid priority %q", p)
			}
			c.Priority = v
		}
		return addOp(tx, verb, c)
	case "set", "map":
		props, err := blockProps(body)
		if err != nil {
			return err
		}
		var flags []string
		if props["flags"] != "" {
			flags = strings.Split(props["flags"], ",")
		}
		if kind == "map" {
			return addOp(tx, verb, &Map{Name: name, Type: props["type"], Flags: flags, Comment: props["comment"]})
		}
		s := &Set{Name: name, Type: props["type"], Flags: flags, Comment: props["comment"]}
		if t := props["timeout"]; t != "" {
			d, err := time.ParseDuration(t)
			if err != nil {
				return fmt.Errorf("invalid timeout %q", t)
			}
			s.Timeout = d
		}
		return addOp(tx, verb, s)
	case "rule":
		if verb != "add" {
			return fmt.Errorf("rules can only be added")
		}
		r, c := trailingComment(body)
		tx.Add(&Rule{Chain: name, Rule: r, Comment: c})
		return nil
	case "element":
		body = strings.TrimSpace(body)
		if !strings.HasPrefix(body, "{ ") || !strings.HasSuffix(body, " }") {
			return fmt.Errorf("expected { element }")
		}
		inner := body[2 : len(body)-2]
		e := &Element{Set: name}
		key, value, _ := strings.Cut(inner, " : ")
		e.Value = value
		key, e.Comment = trailingComment(key)
		e.Key = strings.Split(key, " . ")
		return addOp(tx, verb, e)
	}
	return fmt.Errorf("unknown object %q", kind)
}

func addOp(tx *Transaction, verb string, o any) error {
	switch verb {
	case "add":
		tx.Add(o)
	case "flush":
		tx.Flush(o)
	case "delete":
		tx.Delete(o)
	default:
		return fmt.Errorf("unknown command %q", verb)
	}
	return nil
}
