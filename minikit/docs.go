package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newDocsCommand writes the CLI reference (docs/cli/) from the cobra commands.
func newDocsCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "__docs DIR",
		Short:  "Write the CLI reference as Markdown",
		Hidden: true,
		RunE:   func(*cobra.Command, []string) error { return errors.New("not built yet") },
	}
}
