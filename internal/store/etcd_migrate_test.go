package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

func fill(t *testing.T, s Interface, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if _, err := s.Update(func(tx Tx) error {
			return tx.Put(fmt.Sprintf("/registry/things/%03d", i%(n/2+1)), []byte(fmt.Sprintf(`{"n":%d}`, i)))
		}); err != nil {
			t.Fatal(err)
		}
	}
}

func dump(t *testing.T, s Interface) string {
	t.Helper()
	kvs, _, err := s.List("")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, kv := range kvs {
		fmt.Fprintf(&b, "%s=%s\n", kv.Key, kv.Value)
	}
	return b.String()
}

// Migration both ways: every key arrives, the destination's revision ends above every
// source revision, and a watch from a source revision gets ErrExpired (a client
// relists); a non-empty destination needs force, which replaces its contents.
func TestMigrate(t *testing.T) {
	openBolt := func(t *testing.T) Interface {
		b, err := OpenBolt(filepath.Join(t.TempDir(), "db"), 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	openEtcd := func(t *testing.T) Interface {
		return openTestEtcd(t, EtcdConfig{Endpoints: []string{startTestEtcd(t)}, CompactInterval: -1})
	}
	for _, tc := range []struct {
		name     string
		src, dst func(t *testing.T) Interface
	}{
		{"bolt to etcd", openBolt, openEtcd},
		{"etcd to bolt", openEtcd, openBolt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, dst := tc.src(t), tc.dst(t)
			fill(t, src, 400) // 201 keys at revision ~400: three batches, and padding
			res, err := Migrate(context.Background(), src, dst, false)
			if err != nil {
				t.Fatal(err)
			}
			if res.Copied != 201 || res.DestRev <= res.SourceRev || res.SourceRev != src.Rev() || dst.Rev() != res.DestRev {
				t.Fatalf("result %+v (source at %d, destination at %d)", res, src.Rev(), dst.Rev())
			}
			if got, want := dump(t, dst), dump(t, src); got != want {
				t.Fatalf("destination differs from the source")
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if _, err := dst.Watch(ctx, "/registry/", res.SourceRev-10); !errors.Is(err, ErrExpired) {
				t.Fatalf("watch from a source revision: %v, want ErrExpired", err)
			}
			if _, err := dst.Watch(ctx, "/registry/", res.DestRev); err != nil {
				t.Fatalf("watch from the destination's revision: %v", err)
			}
			// Again: the destination is not empty now.
			if _, err := Migrate(context.Background(), src, dst, false); err == nil || !strings.Contains(err.Error(), "--force") {
				t.Fatalf("migrate into a non-empty store: %v, want a refusal naming --force", err)
			}
			dst.Update(func(tx Tx) error { return tx.Put("/registry/extra", nil) })
			before := dst.Rev()
			res, err = Migrate(context.Background(), src, dst, true)
			if err != nil {
				t.Fatal(err)
			}
			if res.Deleted != 1 || res.Copied != 201 || res.DestRev <= before {
				t.Fatalf("forced migration: %+v (destination was at %d)", res, before)
			}
			if got, want := dump(t, dst), dump(t, src); got != want {
				t.Fatalf("destination differs from the source after the forced migration")
			}
		})
	}
}
