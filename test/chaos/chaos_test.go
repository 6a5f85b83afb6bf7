// Package chaos_test breaks a lab node's kernel state by hand, as a curious student
// would, and checks that the next reconcile repairs it and says so in the log:
// kernel state is derived, never primary (DESIGN.md, invariant 1).
package chaos_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestChaosRepair(t *testing.T) {
	l := testenv.NewLab(t, 2)
	c := testenv.Client(t, l)
	ctx := context.Background()
	mk := func(name, nodeName, image string, cmd ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Image: image, Command: cmd}}}}
		if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return testenv.WaitPodReady(t, c, "default", name)
	}
	client := mk("client", "node1", "busybox", "sleep", "infinity")
	target := mk("target", "node2", "minikit/echo")
	_ = client

	reaches := func(what string) {
		t.Helper()
		testutil.Eventually(t, 30*time.Second, what, func() error {
			out, err := testenv.Exec(t, l, "client", "curl", "-s", "--max-time", "2", "http://"+target.Status.PodIP+":8080/")
			if err != nil || !strings.Contains(out, "pod=target") {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
	}
	run := func(host string, argv ...string) {
		t.Helper()
		if out, err := testenv.Run(l, host, argv...); err != nil {
			t.Fatalf("%s: %v: %v: %s", host, argv, err, out)
		}
	}
	reaches("client reaches target before any chaos")

	cases := []struct {
		name   string
		host   string
		break_ func()
		log    string
	}{
		{"pod veth deleted", "node2", func() {
			out, _ := testenv.Run(l, "node2", "ip", "-o", "link", "show", "master", "cni0")
			veth := strings.TrimSpace(strings.Split(strings.Split(out, ":")[1], "@")[0])
			run("node2", "ip", "link", "del", veth)
		}, "repairing pod sandbox"},
		{"cni0 deleted", "node2", func() { run("node2", "ip", "link", "del", "cni0") }, "created bridge"},
		{"route to the other node withdrawn", "node1", func() {
			n2, _ := c.CoreV1().Nodes().Get(ctx, "node2", metav1.GetOptions{})
			run("node1", "ip", "route", "del", n2.Spec.PodCIDR)
		}, "host-gw route"},
		{"our nat chain flushed", "node1", func() { run("node1", "iptables", "-t", "nat", "-F", "MINIKIT-POSTROUTING") }, "repaired pod masquerade rules"},
		{"jump to our nat chain deleted", "node1", func() {
			run("node1", "iptables", "-t", "nat", "-D", "POSTROUTING", "-m", "comment", "--comment", "minikit pod masquerade", "-j", "MINIKIT-POSTROUTING")
		}, "repaired jump to pod masquerade rules"},
		{"pod netns deleted", "node2", func() { run("node2", "ip", "netns", "del", testenv.SandboxName(t, c, target)) }, "repairing pod sandbox"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := os.ReadFile(filepath.Join(l.Dir(), tc.host+".log"))
			tc.break_()
			testutil.Eventually(t, 15*time.Second, tc.host+" logs the repair ("+tc.log+")", func() error {
				b, _ := os.ReadFile(filepath.Join(l.Dir(), tc.host+".log"))
				if !strings.Contains(string(b[len(before):]), tc.log) {
					return fmt.Errorf("no %q in the new part of %s.log", tc.log, tc.host)
				}
				return nil
			})
			reaches("client reaches target after " + tc.name)
			// The external host sees pods masqueraded again: the nat rules are back.
			from := map[string]string{"node1": "client", "node2": "target"}[tc.host]
			out, err := testenv.Exec(t, l, from, "curl", "-s", "--max-time", "3", "http://"+l.Addr("external").String()+"/")
			if err != nil || !strings.Contains(out, "client_address="+l.Addr(tc.host).String()+":") {
				t.Fatalf("after %s, the external host saw %q (%v); want %s's address", tc.name, out, err, tc.host)
			}
		})
	}
}
