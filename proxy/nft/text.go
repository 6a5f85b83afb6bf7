package nft

import (
	"fmt"
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
