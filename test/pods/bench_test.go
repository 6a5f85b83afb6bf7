package pods_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchmarkHundredPodsReady creates 100 pods at once on node2 of a lab (whose
// process is the node agent alone) and measures the time until all are Ready and
// the agent's peak RSS. Target: under 5 s on a 2-core machine.
func BenchmarkHundredPodsReady(b *testing.B) {
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		l := testenv.NewLab(b, 2)
		c := testenv.Client(b, l)
		pid := l.PID("node2")
		b.StartTimer()
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		for j := 0; j < 100; j++ {
			wg.Add(1)
			go func(j int) {
				defer wg.Done()
				p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%03d", j), Labels: map[string]string{"bench": "pods"}},
					Spec: corev1.PodSpec{NodeName: "node2", Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause"}}}}
				if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
					errs <- err
				}
			}(j)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		testutil.Eventually(b, 120*time.Second, "100 pods Ready", func() error {
			pods, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "bench=pods"})
			if err != nil {
				return err
			}
			ready := 0
			for _, p := range pods.Items {
				for _, cond := range p.Status.Conditions {
					if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
						ready++
					}
				}
			}
			if ready != 100 {
				return fmt.Errorf("%d of 100 Ready", ready)
			}
			return nil
		})
		elapsed := time.Since(start)
		b.StopTimer()
		b.ReportMetric(elapsed.Seconds(), "s/100-pods-ready")
		b.ReportMetric(float64(peakRSSKiB(b, pid))/1024, "MiB-agent-peak-RSS")
		// Delete them before the lab goes, so teardown is measured by nobody.
		c.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "bench=pods"})
		b.StartTimer()
	}
}

func peakRSSKiB(b *testing.B, pid int) int {
	s, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(s), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	return 0
}
