package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/minikit/minikit/internal/cluster"
	"github.com/minikit/minikit/internal/images"

	"github.com/spf13/cobra"
)

// newImageRunCommand is the hidden entry point of built-in images: the node agent
// re-executes minikit as `minikit __image-run IMAGE ARGS...` inside a pod's namespaces.
func newImageRunCommand() *cobra.Command {
	return &cobra.Command{
		Use:                "__image-run IMAGE [ARGS...]",
		Hidden:             true,
		DisableFlagParsing: true,
		Args:               cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			env := map[string]string{}
			for _, kv := range os.Environ() {
				if k, v, ok := strings.Cut(kv, "="); ok {
					env[k] = v
				}
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			err := images.Run(ctx, args[0], args[1:], env, "", func() {}, cluster.ServeClusterDNS(log))
			var ee *images.ExitError
			if errors.As(err, &ee) {
				os.Exit(ee.Code)
			}
			return err
		},
	}
}
