package store

import (
	"errors"
	"fmt"
	"testing"
)

// TestEtcdJudgesOnCurrentState: a server whose last known state is older
// than another server's commit must not return an outcome that writes
// nothing (an error, or "nothing to change") judged on that old state, since
// no commit guard checks it. Here server A last saw v1; B writes v2; A's
// update expects v2 (as a client that just read v2 through B sends its
// resourceVersion) and must succeed, and a no-op judged on v1 must not hide
// B's change.
func TestEtcdJudgesOnCurrentState(t *testing.T) {
	ep := startTestEtcd(t)
	a := openTestEtcd(t, EtcdConfig{Endpoints: []string{ep}})
	b := openTestEtcd(t, EtcdConfig{Endpoints: []string{ep}})
	put := func(s Interface, v string) {
		t.Helper()
		if _, err := s.Update(func(tx Tx) error { return tx.Put("/k", []byte(v)) }); err != nil {
			t.Fatal(err)
		}
	}
	put(a, "v1") // A now knows the state after v1
	put(b, "v2") // A has not seen this commit

	errConflict := errors.New("conflict")
	_, err := a.Update(func(tx Tx) error {
		kv, ok := tx.Get("/k")
		if !ok || string(kv.Value) != "v2" {
			return fmt.Errorf("%w: saw %q", errConflict, kv.Value)
		}
		return tx.Put("/k", []byte("v3"))
	})
	if err != nil {
		t.Fatalf("update expecting v2 after another server wrote it: %v", err)
	}
	if kv, err := b.Get("/k"); err != nil || string(kv.Value) != "v3" {
		t.Fatalf("after the update /k is %q (%v), want v3", kv.Value, err)
	}

	put(b, "v4")
	var saw string
	if _, err := a.Update(func(tx Tx) error {
		kv, _ := tx.Get("/k")
		saw = string(kv.Value)
		return nil // nothing to write
	}); err != nil {
		t.Fatal(err)
	}
	if saw != "v4" {
		t.Errorf("a write-nothing update was judged on %q, want the current v4", saw)
	}
	// The error a client deserves still comes back, once.
	runs := 0
	if _, err := a.Update(func(tx Tx) error { runs++; return errConflict }); !errors.Is(err, errConflict) {
		t.Errorf("got %v, want the function's error", err)
	}
	if runs > 2 {
		t.Errorf("the function ran %d times for one error", runs)
	}
}
