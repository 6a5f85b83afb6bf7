package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/minikit/minikit/internal/cluster"
	"github.com/minikit/minikit/internal/store"
)

// addEtcdFlags adds the flags that say how to reach an external etcd
// (kube-apiserver's names) and fill cfg.
func addEtcdFlags(fl *pflag.FlagSet, cfg *store.EtcdConfig) {
	fl.StringSliceVar(&cfg.Endpoints, "etcd-endpoints", nil, "etcd client URLs, comma-separated (https://IP:2379, or http:// for a plain local etcd)")
	fl.StringVar(&cfg.CAFile, "etcd-cafile", "", "CA bundle that verifies the etcd members' certificates")
	fl.StringVar(&cfg.CertFile, "etcd-certfile", "", "client certificate for etcd")
	fl.StringVar(&cfg.KeyFile, "etcd-keyfile", "", "key of --etcd-certfile")
	fl.StringVar(&cfg.Prefix, "etcd-prefix", store.DefaultEtcdPrefix, "key prefix of the objects in etcd")
}

func newStoreCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "store",
		Short:   "Work on a server's datastore (bbolt or etcd)",
		Example: `  sudo minikit store migrate --from bolt --to etcd --etcd-endpoints http://127.0.0.1:2379`,
	}
	cmd.AddCommand(newStoreMigrateCommand())
	return cmd
}

func newStoreMigrateCommand() *cobra.Command {
	var (
		from, to string
		force    bool
		etcdCfg  store.EtcdConfig
	)
	cmd := &cobra.Command{
		Use:   "migrate --from bolt:PATH|etcd --to etcd|bolt:PATH",
		Short: "Copy every object from one datastore to another (bbolt to etcd and back)",
		Long: `Copy every key of one consistent snapshot of the source datastore into the
destination, which must be empty unless --force (then its contents are replaced).

Stop the servers writing to the source first: later writes are not copied. The
destination's revision ends above every revision of the source and its history
before that is dropped, so clients watching with a resourceVersion from the old
store get 410 Gone and relist instead of missing events.

"bolt" alone is bolt:` + filepath.Join(cluster.DefaultDataDir, "minikit.db") + `; "etcd" is the etcd the --etcd-* flags name.`,
		Example: `  sudo minikit store migrate --from bolt:/var/lib/minikit/minikit.db --to etcd --etcd-endpoints https://10.0.0.11:2379 --etcd-cafile ca.crt --etcd-certfile client.crt --etcd-keyfile client.key
  sudo minikit store migrate --from etcd --to bolt:/tmp/minikit.db --etcd-endpoints http://127.0.0.1:2379`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if from == "" || to == "" {
				return errors.New("--from and --to are both required (bolt:PATH or etcd)")
			}
			if from == to || (from == "etcd") == (to == "etcd") && sameBolt(from, to) {
				return fmt.Errorf("--from %s and --to %s are the same datastore", from, to)
			}
			src, srcName, err := openStoreFlag(ctx, "--from", from, etcdCfg)
			if err != nil {
				return err
			}
			defer src.Close()
			dst, dstName, err := openStoreFlag(ctx, "--to", to, etcdCfg)
			if err != nil {
				return err
			}
			defer dst.Close()
			res, err := store.Migrate(ctx, src, dst, force)
			if err != nil {
				return fmt.Errorf("migrating from %s to %s: %w", srcName, dstName, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "copied %d keys from %s (revision %d) to %s (now at revision %d)", res.Copied, srcName, res.SourceRev, dstName, res.DestRev)
			if res.Deleted > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "; deleted %d keys the source does not have", res.Deleted)
			}
			fmt.Fprintln(cmd.OutOrStdout())
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&from, "from", "", "source datastore: bolt:PATH or etcd")
	fl.StringVar(&to, "to", "", "destination datastore: etcd or bolt:PATH")
	fl.BoolVar(&force, "force", false, "replace the contents of a destination that is not empty")
	addEtcdFlags(fl, &etcdCfg)
	return cmd
}

func boltPath(spec string) string {
	if spec == "bolt" {
		return filepath.Join(cluster.DefaultDataDir, "minikit.db")
	}
	return strings.TrimPrefix(spec, "bolt:")
}

func sameBolt(a, b string) bool {
	pa, _ := filepath.Abs(boltPath(a))
	pb, _ := filepath.Abs(boltPath(b))
	return pa == pb
}

// openStoreFlag opens the datastore a --from or --to value names.
func openStoreFlag(ctx context.Context, flag, spec string, etcdCfg store.EtcdConfig) (store.Interface, string, error) {
	switch {
	case spec == "etcd":
		s, err := store.OpenEtcd(ctx, etcdCfg)
		if err != nil {
			return nil, "", fmt.Errorf("%s etcd: %w", flag, err)
		}
		return s, "etcd " + strings.Join(etcdCfg.Endpoints, ","), nil
	case spec == "bolt" || strings.HasPrefix(spec, "bolt:") && len(spec) > len("bolt:"):
		path := boltPath(spec)
		if flag == "--from" {
			if _, err := os.Stat(path); err != nil {
				return nil, "", fmt.Errorf("%s %s: %w", flag, spec, err)
			}
		}
		s, err := store.OpenBolt(path, 0)
		if err != nil {
			return nil, "", fmt.Errorf("%s %s (is a server using it? stop it first): %w", flag, spec, err)
		}
		return s, "bolt:" + path, nil
	}
	return nil, "", fmt.Errorf("%s %q: want bolt:PATH or etcd", flag, spec)
}
