// Package images owns minikit's built-in container images: Go re-implementations
// of the images the Kubernetes documentation and the e2e conformance suite use
// for networking (serve_hostname, agnhost and its subcommands, pause, nginx,
// httpd, nginxdemos/hello), the Gateway API conformance suite's echo-basic,
// plus minikit's own echo server, so those manifests
// run unchanged on a machine without a container runtime.
//
// The node agent asks Resolve how to start a container, and ResolveExec whether
// an exec addresses the image's own program (`kubectl exec POD -- /agnhost
// dns-suffix`). A built-in image runs as the minikit binary re-executed inside
// the pod's namespaces (`minikit __image-run NAME ARGS...`), which calls Run;
// anything else (a shell script in busybox, jessie-dnsutils or agnhost with
// `command: [sh, -c, ...]`) runs as a host command inside the pod, which is
// why those images' tools (sh, dig, getent, curl, nc, wget) must exist on the
// host. The images answer in their real formats (same
// bodies, same flags, same log lines where it matters) because students compare
// what they see with the docs. Their logs are the container's log: they are
// written to the process's stdout and stderr in each image's own format, not
// through minikit's slog.
package images

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

// Spec is what the node agent knows of a container.
type Spec struct {
	Image   string
	Command []string // container command (ENTRYPOINT override), may be empty
	Args    []string // container args (CMD override), may be empty
	Env     map[string]string
}

// Plan says how to run a container.
type Plan struct {
	// Builtin is true when the container runs as built-in image Name via Run.
	Builtin bool
	// Name is the canonical built-in image name (one of Names), empty for host commands.
	Name string
	// Argv is, for a built-in, the args to pass to Run; otherwise the command line to
	// run from the host's filesystem.
	Argv []string
}

// ExitError is returned by Run when the image itself decided to exit with Code, as
// agnhost netexec does on /exit and /shutdown. The caller exits the process with it.
type ExitError struct {
	Code int
}

// Error says which exit code the image's process ended with.
func (e *ExitError) Error() string {
	return fmt.Sprintf("image exited with code %d", e.Code)
}

// builtin is one image implemented in this package.
type builtin struct {
	// name is the canonical reference, listed by Names; it matches itself.
	name string
	// repos are the repository paths (registry and "library/" removed) that select
	// this image, with any tag unless variant says otherwise.
	repos []string
	// variant, when set, must accept the tag.
	variant func(tag string) bool
	// entrypoints are argv[0] values of a container command that mean "this image's
	// own program", e.g. command: ["/agnhost", "netexec"].
	entrypoints []string
	// execsArgs is set for images whose entrypoint script runs its arguments as a
	// command unless they start the image's program (nginx's docker-entrypoint.sh).
	execsArgs bool
	// cmd is the image's default CMD: the args when a container gives neither
	// command nor args (agnhost's is "pause").
	cmd []string
	// programs are the absolute paths of the image's own executables that an
	// exec may name (ResolveExec); a path the host may also have (nginx) is not
	// listed, so exec never starts a second server by accident.
	programs []string
	// bundles are other built-in images' programs this image ships (agnhost
	// carries CoreDNS as /coredns): a command or exec naming one runs that
	// image.
	bundles map[string]string
	run     func(ctx context.Context, c *container, args []string) error
}

var nginxEntrypoints = []string{"nginx", "nginx-debug", "/usr/sbin/nginx", "/docker-entrypoint.sh"}

func plainText(tag string) bool    { return tag == "plain-text" || strings.HasSuffix(tag, "-plain-text") }
func notPlainText(tag string) bool { return !plainText(tag) }

// builtins is ordered so that the first match wins (tag variants before the plain
// repository).
var builtins = []builtin{
	{
		name:        "registry.k8s.io/e2e-test-images/agnhost",
		repos:       []string{"e2e-test-images/agnhost", "kubernetes-e2e-test-images/agnhost"},
		entrypoints: []string{"/agnhost", "agnhost", "/agnhost-2"},
		cmd:         []string{"pause"},
		programs:    []string{"/agnhost", "/agnhost-2"},
		bundles:     map[string]string{"/coredns": "registry.k8s.io/coredns/coredns"},
		run:         runAgnhost,
	},
	{
		name:        "registry.k8s.io/coredns/coredns",
		repos:       []string{"coredns/coredns", "coredns"},
		entrypoints: []string{"/coredns"},
		programs:    []string{"/coredns"},
		run:         runCoreDNS,
	},
	{
		name:        "registry.k8s.io/serve_hostname",
		repos:       []string{"serve_hostname", "google_containers/serve_hostname", "google-containers/serve_hostname", "minikit/serve-hostname"},
		entrypoints: []string{"/serve_hostname", "serve_hostname"},
		programs:    []string{"/serve_hostname"},
		run: func(ctx context.Context, c *container, args []string) error {
			return serveHostname(ctx, c, args, false)
		},
	},
	{
		name:        "registry.k8s.io/pause",
		repos:       []string{"pause", "pause-amd64", "google_containers/pause", "google_containers/pause-amd64"},
		entrypoints: []string{"/pause"},
		programs:    []string{"/pause"},
		run:         runPause,
	},
	{
		// The e2e suite's nginx images are the alpine nginx image rebuilt.
		name:        "nginx",
		repos:       []string{"nginx", "e2e-test-images/nginx", "kubernetes-e2e-test-images/nginx"},
		entrypoints: nginxEntrypoints,
		execsArgs:   true,
		run:         nginxWelcome(80),
	},
	{
		name:        "nginxinc/nginx-unprivileged",
		repos:       []string{"nginxinc/nginx-unprivileged"},
		entrypoints: nginxEntrypoints,
		execsArgs:   true,
		run:         nginxWelcome(8080),
	},
	{
		name:        "nginxdemos/hello:plain-text",
		repos:       []string{"nginxdemos/hello"},
		variant:     plainText,
		entrypoints: nginxEntrypoints,
		execsArgs:   true,
		run:         nginxHello(helloSite{port: 80, plain: true}),
	},
	{
		name:        "nginxdemos/hello",
		repos:       []string{"nginxdemos/hello"},
		variant:     notPlainText,
		entrypoints: nginxEntrypoints,
		execsArgs:   true,
		run:         nginxHello(helloSite{port: 80, clientIP: true}),
	},
	{
		name:        "nginxdemos/nginx-hello:plain-text",
		repos:       []string{"nginxdemos/nginx-hello", "nginxdemos/hello-nonroot"},
		variant:     plainText,
		entrypoints: nginxEntrypoints,
		execsArgs:   true,
		run:         nginxHello(helloSite{port: 8080, plain: true}),
	},
	{
		name:        "nginxdemos/nginx-hello",
		repos:       []string{"nginxdemos/nginx-hello", "nginxdemos/hello-nonroot"},
		variant:     notPlainText,
		entrypoints: nginxEntrypoints,
		execsArgs:   true,
		run:         nginxHello(helloSite{port: 8080}),
	},
	{
		// httpd's CMD is httpd-foreground (no ENTRYPOINT), so args replace it.
		name:        "httpd",
		repos:       []string{"httpd", "e2e-test-images/httpd", "kubernetes-e2e-test-images/httpd"},
		entrypoints: []string{"httpd-foreground", "/usr/local/bin/httpd-foreground", "httpd", "/usr/local/apache2/bin/httpd"},
		execsArgs:   true,
		run:         runHttpd,
	},
	{
		name:        "registry.k8s.io/e2e-test-images/regression-issue-74839",
		repos:       []string{"e2e-test-images/regression-issue-74839"},
		entrypoints: []string{"/regression-issue-74839"},
		programs:    []string{"/regression-issue-74839"},
		run:         runBoomServer,
	},
	{
		name:  "minikit/echo",
		repos: []string{"minikit/echo"},
		run:   runEcho,
	},
	{
		// The Gateway API conformance suite's backend (its Dockerfile's
		// ENTRYPOINT is /echo-basic).
		name:        "registry.k8s.io/gateway-api/echo-basic",
		repos:       []string{"gateway-api/echo-basic", "k8s-staging-gateway-api/echo-basic"},
		entrypoints: []string{"/echo-basic", "echo-basic", "./echo-basic"},
		programs:    []string{"/echo-basic"},
		run:         echoBasic,
	},
}

// shellImages are general-purpose images that minikit runs from the host's
// filesystem; cmd is the image's default CMD (none has an ENTRYPOINT), used when
// the container gives neither command nor args. The e2e suite's busybox,
// jessie-dnsutils and glibc-dns-testing (dig, getent, nslookup on Debian) only
// ever run shell scripts.
var shellImages = map[string][]string{
	"busybox":                             {"sh"},
	"e2e-test-images/busybox":             {"sh"},
	"kubernetes-e2e-test-images/busybox":  {"sh"},
	"alpine":                              {"/bin/sh"},
	"ubuntu":                              {"/bin/bash"},
	"debian":                              {"bash"},
	"e2e-test-images/jessie-dnsutils":     {"bash"},
	"kubernetes-e2e-test-images/dnsutils": {"bash"},
	"e2e-test-images/glibc-dns-testing":   {"bash"},
}

// Names lists the built-in images by canonical name, for error messages and docs.
func Names() []string {
	names := make([]string, 0, len(builtins))
	for _, b := range builtins {
		names = append(names, b.name)
	}
	slices.Sort(names)
	return names
}

// Resolve says how to run a container, following Kubernetes' command/args rules:
// a command replaces the image's entrypoint, args replace its default arguments.
func Resolve(s Spec) (Plan, error) {
	if s.Image == "" {
		return Plan{}, errors.New("container has no image")
	}
	r := parseRef(s.Image)
	if b, ok := lookup(r); ok {
		switch {
		case len(s.Command) > 0 && b.bundles[s.Command[0]] != "":
			return Plan{Builtin: true, Name: b.bundles[s.Command[0]], Argv: slices.Concat(s.Command[1:], s.Args)}, nil
		case len(s.Command) > 0 && slices.Contains(b.entrypoints, s.Command[0]):
			return Plan{Builtin: true, Name: b.name, Argv: slices.Concat(s.Command[1:], s.Args)}, nil
		case len(s.Command) > 0:
			return Plan{Argv: slices.Concat(s.Command, s.Args)}, nil
		case b.execsArgs && len(s.Args) > 0 && !slices.Contains(b.entrypoints, s.Args[0]):
			return Plan{Argv: slices.Clone(s.Args)}, nil
		case len(s.Command) == 0 && len(s.Args) == 0:
			return Plan{Builtin: true, Name: b.name, Argv: slices.Clone(b.cmd)}, nil
		default:
			return Plan{Builtin: true, Name: b.name, Argv: slices.Clone(s.Args)}, nil
		}
	}
	if cmd, ok := shellImages[r.repo]; ok && len(s.Command) == 0 {
		if len(s.Args) > 0 {
			return Plan{Argv: slices.Clone(s.Args)}, nil
		}
		return Plan{Argv: slices.Clone(cmd)}, nil
	}
	if len(s.Command) > 0 {
		return Plan{Argv: slices.Concat(s.Command, s.Args)}, nil
	}
	return Plan{}, fmt.Errorf("image %q is not a built-in image of minikit and has no command; built-in images: %s",
		s.Image, strings.Join(Names(), ", "))
}

// ResolveExec says whether an exec into a container of image runs the image's
// own program rather than a host command: argv[0] must be one of the built-in
// image's executables by absolute path, as in
// `kubectl exec POD -- /agnhost dns-suffix` or `/agnhost connect ADDR`. It then
// returns the Plan to run (Builtin, Name, and Argv = argv[1:]), which the node
// agent starts as `minikit __image-run NAME ARGV...` inside the pod's
// namespaces with the exec's stdio; the image's exit status is the exec's.
//
// A shell whose script is one simple command naming the program
// (`/bin/sh -x -c "/agnhost connect --timeout=3s no-pods:80"`, how the e2e
// framework's RunHostCmd execs) is that command: the shell would exec it
// with the same words and exit with its status. Only scripts of plain words
// qualify (no quotes, variables, globs, redirections or separators), whose
// meaning needs no shell. Any other argv, including scripts that do more
// with the program, returns false and runs on the host's filesystem.
func ResolveExec(image string, argv []string) (Plan, bool) {
	if len(argv) == 0 {
		return Plan{}, false
	}
	b, ok := lookup(parseRef(image))
	if !ok {
		return Plan{}, false
	}
	if words, ok := simpleShellCommand(argv); ok {
		argv = words
	}
	if b.bundles[argv[0]] != "" {
		return Plan{Builtin: true, Name: b.bundles[argv[0]], Argv: slices.Clone(argv[1:])}, true
	}
	if !slices.Contains(b.programs, argv[0]) {
		return Plan{}, false
	}
	return Plan{Builtin: true, Name: b.name, Argv: slices.Clone(argv[1:])}, true
}

// simpleShellCommand returns the words of argv's script when argv is
// `sh [-x|-e]... -c SCRIPT` and SCRIPT is plain words separated by blanks.
func simpleShellCommand(argv []string) ([]string, bool) {
	switch argv[0] {
	case "sh", "/bin/sh", "/usr/bin/sh", "bash", "/bin/bash", "/usr/bin/bash":
	default:
		return nil, false
	}
	i := 1
	for i < len(argv) && (argv[i] == "-x" || argv[i] == "-e" || argv[i] == "-ex" || argv[i] == "-xe") {
		i++
	}
	if i+2 != len(argv) || argv[i] != "-c" {
		return nil, false
	}
	words := strings.Fields(argv[i+1])
	if len(words) == 0 {
		return nil, false
	}
	for _, w := range words {
		for _, r := range w {
			plain := 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("/._-:=,@%+", r)
			if !plain {
				return nil, false
			}
		}
	}
	return words, true
}

// Run runs built-in image name (a canonical name or any reference that resolves
// to a built-in) with args until ctx is done, then shuts its servers down
// gracefully and returns nil. It is called inside the pod's namespaces.
//
// env is the container's environment (nil means this process's). The pod name is
// env POD_NAME or MY_POD_NAME if set, else the hostname (the pod has its own UTS
// namespace); images that serve "the hostname" (serve_hostname, agnhost,
// nginxdemos) answer the hostname itself, as the real ones do. MINIKIT_NODE_NAME
// and MINIKIT_POD_NAMESPACE name the node and namespace. listenHost overrides the
// host the servers listen on ("" means all addresses). ready, if not nil, is
// called once every socket is listening. clusterDNS serves the coredns image's
// kubernetes plugin.
func Run(ctx context.Context, name string, args []string, env map[string]string, listenHost string, ready func(), clusterDNS ClusterDNS) error {
	b, ok := lookup(parseRef(name))
	if !ok {
		return fmt.Errorf("image %q is not a built-in image of minikit; built-in images: %s", name, strings.Join(Names(), ", "))
	}
	if env == nil {
		env = environ()
	}
	c := newContainer(b.name, env, listenHost, os.Stdout, os.Stderr)
	c.ready = ready
	c.clusterDNS = clusterDNS
	return c.run(ctx, b, args)
}

func environ() map[string]string {
	env := make(map[string]string)
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

// ref is an image reference reduced to what selects an image here.
type ref struct {
	repo string // path without registry host and without docker's "library/"
	tag  string
}

// parseRef follows the docker reference grammar loosely: a first path component
// containing "." or ":" or equal to "localhost" is a registry host.
func parseRef(image string) ref {
	s, _, _ := strings.Cut(image, "@")
	var r ref
	if i := strings.LastIndexByte(s, ':'); i > strings.LastIndexByte(s, '/') {
		s, r.tag = s[:i], s[i+1:]
	}
	if first, rest, ok := strings.Cut(s, "/"); ok && (strings.ContainsAny(first, ".:") || first == "localhost") {
		s = rest
	}
	r.repo = strings.TrimPrefix(s, "library/")
	return r
}

func lookup(r ref) (builtin, bool) {
	for _, b := range builtins {
		if slices.Contains(b.repos, r.repo) && (b.variant == nil || b.variant(r.tag)) {
			return b, true
		}
	}
	return builtin{}, false
}
