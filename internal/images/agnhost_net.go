package images

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"sort"
	"strings"
	"time"
)

// agnhost net: its runners, run once with --runner NAME --options JSON
// (test/images/agnhost/net). The KubeProxy "should set TCP CLOSE_WAIT
// timeout" spec runs the nat-closewait pair: the server half-closes the
// connection it accepts, so the client's node holds a conntrack entry in
// CLOSE_WAIT whose timeout the spec reads.

// netRunner is one runner: it decodes its options and runs, logging to log.
type netRunner func(ctx context.Context, log *log.Logger, options []byte) error

var netRunners = map[string]netRunner{
	"nat-closewait-client": closeWaitClient,
	"nat-closewait-server": closeWaitServer,
}

// agnhostNet is `agnhost net --runner NAME --options JSON`: it runs the
// runner and prints "output:" and the runner's log, exiting 1 when the
// runner failed. --serve (runners triggered over HTTP) is not implemented.
func agnhostNet(ctx context.Context, c *container, args []string) error {
	fs := c.agnhostFlags("net")
	serve := fs.String("serve", "", "Address and port to bind to (e.g. 127.0.0.1:8080).")
	runnerName := fs.String("runner", "", "Runner to execute (available: "+strings.Join(netRunnerNames(), " ")+")")
	options := fs.String("options", "", "JSON options to the Runner")
	fs.Int("delay-shutdown", 0, "Number of seconds to delay shutdown when receiving SIGTERM.")
	if _, err := c.parseAgnhost(fs, args, 0, 0); err != nil {
		return err
	}
	switch {
	case *serve != "":
		return errors.New("agnhost net --serve is not implemented by minikit; use --runner")
	case *runnerName == "":
		return errors.New("must set either --runner or --serve, see --help")
	}
	run, ok := netRunners[*runnerName]
	if !ok {
		return fmt.Errorf("invalid runner: %q, see --help", *runnerName)
	}
	var out bytes.Buffer
	logger := log.New(io.MultiWriter(&out, c.stderr), "", log.LstdFlags)
	err := run(ctx, logger, []byte(*options))
	if err != nil {
		fmt.Fprintf(c.stderr, "Error: %v\n", err)
	}
	fmt.Fprint(c.stdout, "output:\n\n"+out.String())
	if err != nil {
		return &ExitError{Code: 1}
	}
	return nil
}

func netRunnerNames() []string {
	names := make([]string, 0, len(netRunners))
	for n := range netRunners {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// wait sleeps for seconds unless ctx ends first.
func waitSeconds(ctx context.Context, seconds int) {
	t := time.NewTimer(time.Duration(seconds) * time.Second)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// closeWaitServer accepts one connection on LocalAddr, half-closes it (sends
// FIN) and waits PostFinTimeoutSeconds.
func closeWaitServer(ctx context.Context, logger *log.Logger, raw []byte) error {
	var o struct {
		LocalAddr             string
		PostFinTimeoutSeconds int
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return fmt.Errorf("invalid options JSON: %w", err)
	}
	logger.Printf("Run %v", &o)
	addr, err := net.ResolveTCPAddr("tcp", o.LocalAddr)
	if err != nil {
		return err
	}
	ln, err := net.ListenTCP("tcp", addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	logger.Printf("Server listening on %v", addr)
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	conn, err := ln.AcceptTCP()
	if err != nil {
		return err
	}
	defer conn.Close()
	logger.Printf("Client connected")
	if err := conn.CloseWrite(); err != nil {
		return err
	}
	logger.Printf("Server sent FIN, waiting %v seconds", o.PostFinTimeoutSeconds)
	waitSeconds(ctx, o.PostFinTimeoutSeconds)
	logger.Printf("Done")
	return nil
}

// closeWaitClient connects to RemoteAddr, reads until the server's FIN
// (EOF), and then, without closing its side (CLOSE_WAIT), waits
// PostFinTimeoutSeconds. With LeakConnection the connection stays open
// until the process ends.
func closeWaitClient(ctx context.Context, logger *log.Logger, raw []byte) error {
	var o struct {
		RemoteAddr            string
		TimeoutSeconds        int
		PostFinTimeoutSeconds int
		LeakConnection        bool
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return fmt.Errorf("invalid options JSON: %w", err)
	}
	logger.Printf("Run %v", &o)
	addr, err := net.ResolveTCPAddr("tcp", o.RemoteAddr)
	if err != nil {
		return err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr.String())
	if err != nil {
		return err
	}
	conn := c.(*net.TCPConn)
	// Closed when the runner returns: the process's end, which is when the
	// real agnhost's leaked connection closes too.
	defer conn.Close()
	logger.Printf("Connected to server")
	if o.TimeoutSeconds > 0 {
		conn.SetReadDeadline(time.Now().Add(time.Duration(o.TimeoutSeconds) * time.Second))
	}
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Now()) })
	defer stop()
	buf := make([]byte, 1)
	n, err := conn.Read(buf)
	if err != nil && err != io.EOF {
		return err
	}
	if n != 0 {
		return errors.New("Got data but expected EOF")
	}
	logger.Printf("Server has half-closed the connection, waiting %v seconds", o.PostFinTimeoutSeconds)
	if o.LeakConnection {
		logger.Printf("Leaking client connection (assigning to global variable)")
	}
	waitSeconds(ctx, o.PostFinTimeoutSeconds)
	logger.Printf("Done")
	return nil
}
