package nft

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
)

// Exec applies transactions the way knftables (and so kube-proxy) does: the
// transaction rendered as text and fed to one `nft -f -`, which nft applies
// as one netlink batch. It reads with `nft -j list`. It runs nft in the
// network namespace of the calling thread, so callers in another namespace
// enter it first (netns.Do).
type Exec struct {
	family Family
	table  string
	nft    string
}

var _ Interface = (*Exec)(nil)

// NewExec returns an Exec backend for the table family/table; it fails when
// the nft binary is missing.
func NewExec(family Family, table string) (*Exec, error) {
	if err := checkFamily(family); err != nil {
		return nil, fmt.Errorf("exec backend: %w", err)
	}
	path, err := exec.LookPath("nft")
	if err != nil {
		return nil, fmt.Errorf("finding nft binary: %w", err)
	}
	return &Exec{family: family, table: table, nft: path}, nil
}

func (e *Exec) run(ctx context.Context, stdin string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, e.nft, args...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if strings.Contains(msg, "No such file or directory") {
			return nil, fmt.Errorf("nft %s: %s: %w", strings.Join(args, " "), msg, ErrNotFound)
		}
		return nil, fmt.Errorf("nft %s: %v: %s", strings.Join(args, " "), err, msg)
	}
	return out.Bytes(), nil
}

// Run applies tx with one `nft -f -`.
func (e *Exec) Run(ctx context.Context, tx *Transaction) error {
	if len(tx.Ops) == 0 {
		return nil
	}
	text, err := RenderTransaction(e.family, e.table, tx)
	if err != nil {
		return err
	}
	_, err = e.run(ctx, text, "-f", "-")
	return err
}

type nftJSON struct {
	Nftables []map[string]json.RawMessage `json:"nftables"`
}

func (e *Exec) listJSON(ctx context.Context, args ...string) ([]map[string]json.RawMessage, error) {
	out, err := e.run(ctx, "", append([]string{"-j"}, args...)...)
	if err != nil {
		return nil, err
	}
	var doc nftJSON
	if err := json.Unmarshal(out, &doc); err != nil {
		return nil, fmt.Errorf("parsing nft -j %s: %w", strings.Join(args, " "), err)
	}
	return doc.Nftables, nil
}

// ListChains returns the table's chain names.
func (e *Exec) ListChains(ctx context.Context) ([]string, error) {
	objs, err := e.listJSON(ctx, "list", "chains", string(e.family))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, o := range objs {
		raw, ok := o["chain"]
		if !ok {
			continue
		}
		var c struct{ Table, Name string }
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("parsing nft chain: %w", err)
		}
		if c.Table == e.table {
			names = append(names, c.Name)
		}
	}
	return names, nil
}

// ListSets returns the names of the table's named sets and maps.
func (e *Exec) ListSets(ctx context.Context) ([]string, error) {
	var names []string
	for _, kind := range []string{"set", "map"} {
		objs, err := e.listJSON(ctx, "list", kind+"s", string(e.family))
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			raw, ok := o[kind]
			if !ok {
				continue
			}
			var s struct{ Table, Name string }
			if err := json.Unmarshal(raw, &s); err != nil {
				return nil, fmt.Errorf("parsing nft %s: %w", kind, err)
			}
			if s.Table == e.table {
				names = append(names, s.Name)
			}
		}
	}
	return names, nil
}

// CountRules counts a chain's rules.
func (e *Exec) CountRules(ctx context.Context, chain string) (int, error) {
	objs, err := e.listJSON(ctx, "list", "chain", string(e.family), e.table, chain)
	if err != nil {
		return 0, fmt.Errorf("counting rules of chain %q: %w", chain, err)
	}
	n := 0
	for _, o := range objs {
		if _, ok := o["rule"]; ok {
			n++
		}
	}
	return n, nil
}

// ListElements lists a set's or map's elements (keys and values as nft
// prints them in text form).
func (e *Exec) ListElements(ctx context.Context, set string) ([]*Element, error) {
	out, err := e.run(ctx, "", "list", "set", string(e.family), e.table, set)
	if err != nil {
		out, err = e.run(ctx, "", "list", "map", string(e.family), e.table, set)
		if err != nil {
			return nil, fmt.Errorf("listing elements of %q: %w", set, err)
		}
	}
	return parseListedElements(set, string(out)), nil
}

// parseListedElements reads the `elements = { ... }` block of `nft list set`.
func parseListedElements(set, text string) []*Element {
	i := strings.Index(text, "elements = {")
	if i < 0 {
		return nil
	}
	body := text[i+len("elements = {"):]
	body = body[:strings.Index(body, "}")]
	var out []*Element
	for _, item := range strings.Split(body, ",") {
		item = strings.Join(strings.Fields(item), " ")
		if item == "" {
			continue
		}
		el := &Element{Set: set}
		key, val, isMap := strings.Cut(item, " : ")
		if isMap {
			el.Value = val
		}
		if k, c, ok := strings.Cut(key, " comment "); ok {
			key, el.Comment = k, strings.Trim(c, `"`)
		}
		el.Key = strings.Split(key, " . ")
		out = append(out, el)
	}
	return out
}

// DeleteTable removes the table if it exists.
func (e *Exec) DeleteTable(ctx context.Context) error {
	text := fmt.Sprintf("add table %s %s\ndelete table %s %s\n", e.family, e.table, e.family, e.table)
	_, err := e.run(ctx, text, "-f", "-")
	return err
}

// List returns `nft list table` output (for tests and debugging).
func (e *Exec) List(ctx context.Context) (string, error) {
	out, err := e.run(ctx, "", "list", "table", string(e.family), e.table)
	return string(out), err
}
