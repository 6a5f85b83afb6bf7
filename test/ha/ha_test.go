// Package ha_test runs an HA control plane in a lab: three servers on an
// embedded etcd, one agent, and kills the etcd leader's minikit while four
// clients create Services.
package ha_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

const servers = 3

func TestHAControlPlane(t *testing.T) {
	root := testenv.RootSnapshot(t, func(string) bool { return false })
	l := testenv.NewLabConfig(t, lab.Config{Nodes: servers + 1, Servers: servers})
	defer func() {
		if after := testenv.RootSnapshot(t, func(string) bool { return false }); after != root {
			t.Errorf("the root network namespace changed:\n--- before\n%s\n--- after\n%s", root, after)
		}
	}()
	c := testenv.Client(t, l)
	ctx := context.Background()
	var serverIPs []string
	for i := 1; i <= servers; i++ {
		serverIPs = append(serverIPs, l.Addr(fmt.Sprintf("node%d", i)).String())
	}
	sort.Strings(serverIPs)

	t.Run("the kubernetes endpoints name every server", func(t *testing.T) {
		waitEndpoints(t, c, "default/kubernetes endpoints of all servers", serverIPs)
	})

	t.Run("every server is an etcd voting member", func(t *testing.T) {
		testutil.Eventually(t, 60*time.Second, "3 voting members", func() error {
			ms, err := members(t, l)
			if err != nil {
				return err
			}
			var names []string
			for _, m := range ms.Members {
				if m.IsLearner {
					return fmt.Errorf("%s is still a learner", m.Name)
				}
				names = append(names, m.Name)
			}
			sort.Strings(names)
			if want := []string{"node1", "node2", "node3"}; !slices.Equal(names, want) {
				return fmt.Errorf("members %v, want %v", names, want)
			}
			return nil
		})
	})

	t.Run("kill -9 of the etcd leader during 1000 creates", func(t *testing.T) {
		leader, err := etcdLeader(t, l)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("etcd leader: %s", leader)

		// An informer over Services from the start: it must see every
		// Service, relisting at most once, and never miss an event.
		var lists atomic.Int32
		lw := &cache.ListWatch{
			ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
				lists.Add(1)
				return c.CoreV1().Services("ha").List(ctx, o)
			},
			WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
				return c.CoreV1().Services("ha").Watch(ctx, o)
			},
		}
		seen := sync.Map{}
		inf := cache.NewSharedIndexInformer(lw, &corev1.Service{}, 0, cache.Indexers{})
		inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(o any) {
			seen.Store(o.(*corev1.Service).Name, true)
		}})
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ha"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		defer close(stop)
		go inf.Run(stop)
		if !cache.WaitForCacheSync(stop, inf.HasSynced) {
			t.Fatal("informer did not sync")
		}
		listsBefore := lists.Load()

		const clients, total = 4, 1000
		var acked sync.Map
		var done atomic.Int32
		var wg sync.WaitGroup
		errs := make(chan error, clients)
		for w := 0; w < clients; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < total; i += clients {
					name := fmt.Sprintf("s%04d", i)
					svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{
						Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80}}}}
					deadline := time.Now().Add(60 * time.Second)
					for {
						_, err := c.CoreV1().Services("ha").Create(ctx, svc, metav1.CreateOptions{})
						if err == nil {
							acked.Store(name, true)
							break
						}
						// A create whose answer was lost may have committed: the
						// retry finds it. Only a 201 counts as acknowledged.
						if apierrors.IsAlreadyExists(err) {
							break
						}
						if time.Now().After(deadline) {
							errs <- fmt.Errorf("creating %s: %w", name, err)
							return
						}
						time.Sleep(100 * time.Millisecond)
					}
					done.Add(1)
				}
			}()
		}
		for done.Load() < total/5 {
			time.Sleep(10 * time.Millisecond)
		}
		killed := time.Now()
		if err := l.Stop(leader, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// How long until the API answers again through the lab's forwarder.
		var back time.Duration
		for {
			if _, err := c.CoreV1().Services("ha").Get(ctx, "no-such", metav1.GetOptions{}); err == nil || apierrors.IsNotFound(err) {
				back = time.Since(killed)
				break
			}
			if time.Since(killed) > 60*time.Second {
				t.Fatal("the API did not answer within 60 s of the leader's kill")
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("REPORT: the API answered again %.2f s after kill -9 of the etcd leader (%s)", back.Seconds(), leader)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}

		list, err := c.CoreV1().Services("ha").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		ips, ports := map[string]string{}, map[int32]string{}
		for _, s := range list.Items {
			have[s.Name] = true
			if o, dup := ips[s.Spec.ClusterIP]; dup {
				t.Errorf("ClusterIP %s given to %s and %s", s.Spec.ClusterIP, o, s.Name)
			}
			ips[s.Spec.ClusterIP] = s.Name
			np := s.Spec.Ports[0].NodePort
			if o, dup := ports[np]; dup {
				t.Errorf("NodePort %d given to %s and %s", np, o, s.Name)
			}
			ports[np] = s.Name
		}
		nAcked := 0
		acked.Range(func(k, _ any) bool {
			nAcked++
			if !have[k.(string)] {
				t.Errorf("acknowledged Service %s is gone", k)
			}
			return true
		})
		if len(list.Items) != total {
			t.Errorf("%d Services, want %d", len(list.Items), total)
		}
		t.Logf("%d acknowledged creates, %d Services, %d distinct ClusterIPs and NodePorts", nAcked, len(list.Items), len(ips))
		testutil.Eventually(t, 30*time.Second, "the informer has every Service", func() error {
			missing := 0
			for n := range have {
				if _, ok, _ := inf.GetStore().GetByKey("ha/" + n); !ok {
					missing++
				}
			}
			if missing > 0 {
				return fmt.Errorf("%d Services missing from the informer's cache", missing)
			}
			return nil
		})
		for n := range have {
			if _, ok := seen.Load(n); !ok {
				t.Errorf("the informer never had an Add for %s", n)
			}
		}
		relists := lists.Load() - listsBefore
		t.Logf("REPORT: informer relists after the kill: %d", relists)
		if relists > 1 {
			t.Errorf("the informer relisted %d times, want at most once", relists)
		}

		// The cluster's singletons moved with the lease: a Deployment created
		// now gets its pods (on the agent, which runs).
		testutil.Eventually(t, 60*time.Second, "the controller-manager lease held by a running server", func() error {
			l, err := c.CoordinationV1().Leases("kube-system").Get(ctx, "minikit-controller-manager", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if h := l.Spec.HolderIdentity; h == nil || *h == leader || *h == "" {
				return fmt.Errorf("held by %v", h)
			}
			return nil
		})
		two := int32(2)
		labels := map[string]string{"app": "after-kill"}
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "after-kill"}, Spec: appsv1.DeploymentSpec{
			Replicas: &two, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				NodeSelector: map[string]string{"kubernetes.io/hostname": fmt.Sprintf("node%d", servers+1)},
				Containers:   []corev1.Container{{Name: "c", Image: "minikit/echo"}}}}}}
		if _, err := c.AppsV1().Deployments("ha").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 90*time.Second, "deployment after-kill available", func() error {
			d, err := c.AppsV1().Deployments("ha").Get(ctx, "after-kill", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if d.Status.AvailableReplicas != 2 {
				return fmt.Errorf("%d of 2 available", d.Status.AvailableReplicas)
			}
			return nil
		})

		// The killed server comes back as a member with its own data.
		if err := l.Start(leader); err != nil {
			t.Fatal(err)
		}
		waitEndpoints(t, c, leader+" back among the kubernetes endpoints", serverIPs)
	})
}

// waitEndpoints waits until default/kubernetes names exactly want.
func waitEndpoints(t *testing.T, c kubernetes.Interface, what string, want []string) {
	t.Helper()
	testutil.Eventually(t, 60*time.Second, what, func() error {
		ep, err := c.CoreV1().Endpoints("default").Get(context.Background(), "kubernetes", metav1.GetOptions{})
		if err != nil {
			return err
		}
		var got []string
		for _, s := range ep.Subsets {
			for _, a := range s.Addresses {
				got = append(got, a.IP)
			}
		}
		sort.Strings(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("endpoints %v, want %v", got, want)
		}
		return nil
	})
}

// etcdClient talks to the lab's etcd from node from's namespace with the
// client certificate node1's member uses (issued from the cluster CA).
func etcdClient(t *testing.T, l *lab.Lab, from string, endpoints []string) (*clientv3.Client, error) {
	t.Helper()
	pki := filepath.Join(l.Dir(), "node1", "etcd", "pki")
	cert, err := tls.LoadX509KeyPair(filepath.Join(pki, "client.crt"), filepath.Join(pki, "client.key"))
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(filepath.Join(l.Dir(), "node1", "tls", "ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	ns := lab.NS(l.Name(), from)
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 3 * time.Second,
		TLS:         &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}},
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return lab.DialIn(ctx, ns, "tcp", addr)
		})},
	})
}

// running are the servers whose minikit runs.
func running(l *lab.Lab) []string {
	var hs []string
	for i := 1; i <= servers; i++ {
		h := fmt.Sprintf("node%d", i)
		if l.PID(h) > 0 {
			hs = append(hs, h)
		}
	}
	return hs
}

func members(t *testing.T, l *lab.Lab) (*clientv3.MemberListResponse, error) {
	var eps []string
	for _, h := range running(l) {
		eps = append(eps, "https://"+net.JoinHostPort(l.Addr(h).String(), "2379"))
	}
	cli, err := etcdClient(t, l, "node1", eps)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return cli.MemberList(ctx)
}

// etcdLeader is the node whose member leads the etcd cluster.
func etcdLeader(t *testing.T, l *lab.Lab) (string, error) {
	ms, err := members(t, l)
	if err != nil {
		return "", err
	}
	ep := "https://" + net.JoinHostPort(l.Addr("node1").String(), "2379")
	cli, err := etcdClient(t, l, "node1", []string{ep})
	if err != nil {
		return "", err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := cli.Status(ctx, ep)
	if err != nil {
		return "", err
	}
	for _, m := range ms.Members {
		if m.ID == st.Leader {
			return m.Name, nil
		}
	}
	return "", errors.New("no member is the leader")
}
