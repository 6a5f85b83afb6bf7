// Command dnsserver runs minikit's cluster DNS server alone against an API
// server (a kubeconfig), the way a node runs it but on a chosen address and
// without registering in kube-dns: for benchmarks (scripts/bench-dns.sh) and
// for poking at the server with dig.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

	"github.com/minikit/minikit/internal/dns"

	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API to watch")
	listen := flag.String("listen", "127.0.0.1:5355", "UDP and TCP address to answer on")
	upstream := flag.String("upstream", "", "resolver for names outside the cluster (IP or IP:port)")
	noMemo := flag.Bool("no-memo", false, "answer every query from the snapshot (no memo of packed replies)")
	pods := flag.String("pods", dns.PodsDisabled, "pod records: disabled, insecure or verified")
	debug := flag.Bool("debug", false, "debug logging")
	flag.Parse()
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if err := run(*kubeconfig, *listen, *upstream, *pods, *noMemo, log); err != nil {
		fmt.Fprintln(os.Stderr, "dnsserver:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, listen, upstream, pods string, noMemo bool, log *slog.Logger) error {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	rc.QPS, rc.Burst = 100, 200
	core, discovery, err := dns.RESTClients(rc)
	if err != nil {
		return err
	}
	addr, err := netip.ParseAddrPort(listen)
	if err != nil {
		return err
	}
	cfg := dns.Config{Pods: pods, NoMemo: noMemo, Logger: log,
		ServiceCIDR: netip.MustParsePrefix("10.96.0.0/12"), ClusterCIDR: netip.MustParsePrefix("10.244.0.0/16")}
	if upstream != "" {
		up, err := dns.ParseUpstream(upstream)
		if err != nil {
			return err
		}
		cfg.Upstreams = []netip.AddrPort{up}
	}
	srv, err := dns.New(cfg, dns.NewInformerSource(core, discovery, pods == dns.PodsVerified))
	if err != nil {
		return err
	}
	l, err := dns.Listen(addr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go srv.Run(ctx)
	go func() {
		select {
		case <-srv.Synced():
			fmt.Printf("ready %s pid %d\n", l.Addr, os.Getpid())
		case <-ctx.Done():
		}
	}()
	return srv.Serve(ctx, l)
}
