package nft

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// BenchmarkBackends measures Netlink against Exec (`nft -f -`, what
// knftables and so kube-proxy run) in the same run, each in its own network
// namespace, on kube-proxy-shaped tables of N services x 5 endpoints:
//
//	full:    a full sync (every base chain flushed and refilled, every
//	         service chain flushed and rewritten, every set/map refilled)
//	partial: one service's endpoints changed (its chain flushed and
//	         rewritten, hairpin elements deleted and added)
//
// It reports ms/op of each backend and their ratio (exec/netlink).
func BenchmarkBackends(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		svcs := genServices(n, 5)
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			p := newPair(b)
			ctx := context.Background()
			initial := fullTx(svcs, true)
			inNS(b, p.execNS, func() error { return p.exec.Run(ctx, initial) })
			if err := p.nl.Run(ctx, initial); err != nil {
				b.Fatal(err)
			}
			full := fullTx(svcs, false)
			b.Run("full", func(b *testing.B) {
				measure(b, p, func(int) *Transaction { return full })
			})
			flips := 0 // the state carries over between the benchmark's rounds
			b.Run("partial", func(b *testing.B) {
				measure(b, p, func(int) *Transaction { flips++; return partialTx(svcs[n/2], flips) })
			})
		})
	}
}

func measure(b *testing.B, p *pair, txFor func(i int) *Transaction) {
	ctx := context.Background()
	var execD, nlD time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tx := txFor(i)
		start := time.Now()
		inNS(b, p.execNS, func() error { return p.exec.Run(ctx, tx) })
		execD += time.Since(start)
		start = time.Now()
		if err := p.nl.Run(ctx, tx); err != nil {
			b.Fatal(err)
		}
		nlD += time.Since(start)
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(ms(nlD), "netlink-ms/op")
	b.ReportMetric(ms(execD), "exec-ms/op")
	b.ReportMetric(float64(execD)/float64(nlD), "exec/netlink")
}

// partialTx moves one service between two endpoint sets (i even / odd).
func partialTx(s svcSpec, i int) *Transaction {
	old, next := s.endpoints, make([]string, len(s.endpoints))
	for j, ep := range s.endpoints {
		next[j] = strings.Replace(ep, ":8080", ":9090", 1)
	}
	if i%2 == 0 {
		old, next = next, old
	}
	tx := &Transaction{}
	chain := hashed("service-", s.portName())
	tx.Add(&Chain{Name: chain})
	tx.Flush(&Chain{Name: chain})
	var elems []string
	for j, ep := range next {
		elems = append(elems, fmt.Sprintf("%d : %s", j, strings.Replace(ep, ":", " . ", 1)))
	}
	tx.Add(&Rule{Chain: chain, Rule: fmt.Sprintf("meta l4proto tcp dnat ip addr . port to numgen random mod %d map { %s }", len(next), strings.Join(elems, " , "))})
	for j := range old {
		ip, port, _ := strings.Cut(old[j], ":")
		tx.Delete(&Element{Set: "hairpin-connections", Key: []string{ip, ip, "tcp", port}})
		ip, port, _ = strings.Cut(next[j], ":")
		tx.Add(&Element{Set: "hairpin-connections", Key: []string{ip, ip, "tcp", port}})
	}
	return tx
}
