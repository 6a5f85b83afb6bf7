package images

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// agnhostCommand is one subcommand of registry.k8s.io/e2e-test-images/agnhost.
type agnhostCommand struct {
	short string
	run   func(ctx context.Context, c *container, args []string) error
}

// agnhostCommands are the subcommands minikit implements: the ones the Kubernetes
// networking docs, the sig-network conformance specs and the sig-auth
// ServiceAccounts specs run.
var agnhostCommands = map[string]agnhostCommand{
	"connect":         {"Attempts a TCP, UDP or SCTP connection and returns useful errors", connect},
	"dns-server-list": {"Prints the host's DNS Server list", dnsServerList},
	"dns-suffix":      {"Prints the host's DNS suffix list", dnsSuffix},
	"etc-hosts":       {"Prints the host's /etc/hosts file", etcHosts},
	"liveness":        {"Starts a server that fails liveness probes after 10 seconds", liveness},
	"mounttest":       {"Creates files with given permissions and outputs FS type, owner, mode, permissions, contents of files", mounttest},
	"net":             {"Creates webserver or runner for various networking tests", agnhostNet},
	"netexec":         {"Creates HTTP(S) and UDP servers with various endpoints", netexec},
	"pause":           {"Pauses the execution", agnhostPause},
	"porter":          {"Serves requested data on ports specified in ENV variables", porter},
	"serve-hostname": {"Serves the hostname", func(ctx context.Context, c *container, args []string) error {
		return serveHostname(ctx, c, args, true)
	}},
	"test-service-account-issuer-discovery": {"Tests the ServiceAccountIssuerDiscovery feature", testIssuerDiscovery},
	"test-webserver":                        {"Starts a simple HTTP fileserver", testWebserver},
}

// runAgnhost is registry.k8s.io/e2e-test-images/agnhost: its first argument picks
// the subcommand, as with the real image's cobra CLI. With no arguments at all
// (command: ["/agnhost"]) it prints its help and exits 0, as cobra does; a
// container that gives neither command nor args gets the image's CMD, "pause".
func runAgnhost(ctx context.Context, c *container, args []string) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "--help" || args[0] == "-h" {
		fmt.Fprint(c.stdout, agnhostHelp())
		return nil
	}
	sub, rest := args[0], args[1:]
	cmd, ok := agnhostCommands[sub]
	if !ok {
		return fmt.Errorf("agnhost subcommand %q is not implemented by minikit; implemented: %s",
			sub, strings.Join(agnhostNames(), ", "))
	}
	err := cmd.run(ctx, c, rest)
	if errors.Is(err, errHelpShown) {
		return nil
	}
	return err
}

func agnhostNames() []string {
	names := make([]string, 0, len(agnhostCommands))
	for n := range agnhostCommands {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func agnhostHelp() string {
	var b strings.Builder
	b.WriteString("Usage:\n  app [command]\n\nAvailable Commands (those minikit implements):\n")
	for _, n := range agnhostNames() {
		fmt.Fprintf(&b, "  %-16s %s\n", n, agnhostCommands[n].short)
	}
	b.WriteString("\nUse \"app [command] --help\" for more information about a command.\n")
	return b.String()
}

// errHelpShown ends a subcommand that printed its usage for --help; agnhost then
// exits 0.
var errHelpShown = errors.New("help shown")

// agnhostFlags returns a flag set that parses like agnhost's cobra commands:
// pflag syntax (--flag=v, --flag v, --bool, --bool=false), flags and
// positional arguments in any order, "_" and "-" alike in flag names, and
// klog's -v, --vmodule and --log-flush-frequency accepted and ignored (agnhost
// runs through component-base's cli.Run, which adds them: some tests pass them).
func (c *container) agnhostFlags(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {} // parseAgnhost prints usage for --help, errors say what is wrong
	fs.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		return pflag.NormalizedName(strings.ReplaceAll(name, "_", "-"))
	})
	fs.StringP("v", "v", "0", "number for the log level verbosity")
	fs.String("vmodule", "", "comma-separated list of pattern=N settings for file-filtered logging")
	fs.String("log-flush-frequency", "5s", "Maximum number of seconds between log flushes")
	return fs
}

// parseAgnhost parses args into fs and returns the positional arguments, of
// which there must be between minArgs and maxArgs (cobra's Args checks).
func (c *container) parseAgnhost(fs *pflag.FlagSet, args []string, minArgs, maxArgs int) ([]string, error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprintf(c.stdout, "Usage:\n  app %s [flags]\n\nFlags:\n%s", fs.Name(), fs.FlagUsages())
			return nil, errHelpShown
		}
		return nil, fmt.Errorf("parsing %s arguments %q: %w", fs.Name(), args, err)
	}
	pos := fs.Args()
	switch {
	case minArgs > 0 && minArgs == maxArgs && len(pos) != minArgs:
		return nil, fmt.Errorf("%s: accepts %d arg(s), received %d", fs.Name(), minArgs, len(pos))
	case len(pos) > maxArgs:
		return nil, fmt.Errorf("%s: accepts at most %d arg(s), received %d", fs.Name(), maxArgs, len(pos))
	case len(pos) < minArgs:
		return nil, fmt.Errorf("%s: requires at least %d arg(s), only received %d", fs.Name(), minArgs, len(pos))
	}
	return pos, nil
}

// agnhostPause is `agnhost pause`: it says so and waits. Stopped by a signal it
// reports which one and exits 1 for SIGINT, 2 for SIGTERM, as the real one does
// (a plain cancellation, as in tests, returns nil).
func agnhostPause(ctx context.Context, c *container, args []string) error {
	if _, err := c.parseAgnhost(c.agnhostFlags("pause"), args, 0, 0); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, "Paused")
	fmt.Fprintln(c.stdout, "Signals registered")
	if err := c.serve(ctx); err != nil {
		return err
	}
	sig, code, ok := signalOf(ctx)
	if !ok {
		return nil
	}
	fmt.Fprintf(c.stdout, "exiting because of signal %q\n", sig)
	return &ExitError{Code: code}
}

// signalOf reports the signal that cancelled ctx, if signal.NotifyContext did
// (its cause reads "<signal> signal received"), with the exit code agnhost pause
// gives it.
func signalOf(ctx context.Context) (string, int, bool) {
	cause := context.Cause(ctx)
	if cause == nil {
		return "", 0, false
	}
	sig, ok := strings.CutSuffix(cause.Error(), " signal received")
	if !ok {
		return "", 0, false
	}
	switch sig {
	case "interrupt":
		return sig, 1, true
	case "terminated":
		return sig, 2, true
	}
	return sig, 0, true
}

// liveness is `agnhost liveness`, the server of the Kubernetes liveness-probe
// tutorial: /healthz answers 200 for the first 10 seconds, then 500. The real one
// always listens on 8080; MINIKIT_PORT overrides that for tests.
func liveness(ctx context.Context, c *container, args []string) error {
	if _, err := c.parseAgnhost(c.agnhostFlags("liveness"), args, 0, 0); err != nil {
		return err
	}
	port, err := c.envPort("MINIKIT_PORT", 8080)
	if err != nil {
		return err
	}
	started := c.now()
	mux := http.NewServeMux()
	mux.HandleFunc("/started", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, c.now().Sub(started).String())
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		d := c.now().Sub(started)
		if d.Seconds() > 10 {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, "error: %v", d.Seconds())
			return
		}
		fmt.Fprint(w, "ok")
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		loc, err := url.QueryUnescape(r.URL.Query().Get("loc"))
		if err != nil {
			http.Error(w, fmt.Sprintf("invalid redirect: %q", r.URL.Query().Get("loc")), http.StatusBadRequest)
			return
		}
		http.Redirect(w, r, loc, http.StatusFound)
	})
	ln, err := c.listenTCP(c.listenHost, port)
	if err != nil {
		return err
	}
	return c.serve(ctx, c.httpServer(ln, mux))
}
