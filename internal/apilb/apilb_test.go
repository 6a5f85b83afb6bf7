package apilb

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"testing"
)

// echoServer answers every line with its name and the line.
func echoServer(t *testing.T, name string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					fmt.Fprintf(c, "%s %s\n", name, sc.Text())
				}
			}()
		}
	}()
	return ln
}

func ask(t *testing.T, addr, line string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintln(c, line)
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "error: " + err.Error()
	}
	return got
}

func TestFailoverAndStickiness(t *testing.T) {
	a, b := echoServer(t, "a"), echoServer(t, "b")
	// A closed port: refuses at once, as a killed server in a lab does.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()

	lb, err := New([]string{deadAddr, a.Addr().String(), b.Addr().String()}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- lb.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })

	if got := ask(t, ln.Addr().String(), "1"); got != "a 1\n" {
		t.Fatalf("first connection got %q, want a's answer (the first server refuses)", got)
	}
	if lb.Current() != a.Addr().String() {
		t.Errorf("current %s, want %s", lb.Current(), a.Addr())
	}
	a.Close()
	if got := ask(t, ln.Addr().String(), "2"); got != "b 2\n" {
		t.Fatalf("after a stopped got %q, want b's answer", got)
	}
	// b answered last: it stays first even though a comes earlier in the list.
	a2 := echoServer(t, "a")
	_ = a2
	if got := ask(t, ln.Addr().String(), "3"); got != "b 3\n" {
		t.Fatalf("got %q, want b (the server that answered last) first", got)
	}
	b.Close()
	if _, _, err := lb.Dial(context.Background()); err == nil {
		t.Fatal("dialled with every server down")
	}
}

func TestNewRejectsBadAddresses(t *testing.T) {
	if _, err := New(nil, nil, nil); err == nil {
		t.Error("no servers accepted")
	}
	if _, err := New([]string{"https://x:6443"}, nil, nil); err == nil {
		t.Error("a URL accepted as host:port")
	}
}
