package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newTraceCommand is `minikit trace FROM TO`.
func newTraceCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "trace FROM TO",
		Short:  "Show the path a packet takes through a node's iptables rules",
		Hidden: true,
		RunE:   func(*cobra.Command, []string) error { return errors.New("not built yet") },
	}
}
