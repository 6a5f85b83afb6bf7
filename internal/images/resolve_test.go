package images

import (
	"slices"
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	const (
		agnhost  = "registry.k8s.io/e2e-test-images/agnhost"
		hostname = "registry.k8s.io/serve_hostname"
	)
	tests := []struct {
		name string
		spec Spec
		want Plan
	}{
		// Kubernetes docs' nginx Deployment and friends.
		{"nginx with tag", Spec{Image: "nginx:1.14.2"}, Plan{Builtin: true, Name: "nginx"}},
		{"nginx fully qualified", Spec{Image: "docker.io/library/nginx:latest"}, Plan{Builtin: true, Name: "nginx"}},
		{"nginx by digest", Spec{Image: "nginx@sha256:0123abcd"}, Plan{Builtin: true, Name: "nginx"}},
		{"nginx from a local registry", Spec{Image: "localhost:5000/nginx:1.27"}, Plan{Builtin: true, Name: "nginx"}},
		{"nginx command is its own entrypoint",
			Spec{Image: "nginx", Command: []string{"nginx", "-g", "daemon off;"}},
			Plan{Builtin: true, Name: "nginx", Argv: []string{"-g", "daemon off;"}}},
		{"nginx args that start nginx",
			Spec{Image: "nginx", Args: []string{"nginx", "-g", "daemon off;"}},
			Plan{Builtin: true, Name: "nginx", Argv: []string{"nginx", "-g", "daemon off;"}}},
		{"nginx args that are a command run it, as docker-entrypoint.sh does",
			Spec{Image: "nginx:alpine", Args: []string{"sh", "-c", "echo hi"}},
			Plan{Argv: []string{"sh", "-c", "echo hi"}}},
		{"nginx with a shell command runs on the host",
			Spec{Image: "nginx", Command: []string{"/bin/sh", "-c"}, Args: []string{"sleep 1"}},
			Plan{Argv: []string{"/bin/sh", "-c", "sleep 1"}}},
		{"nginx-unprivileged", Spec{Image: "nginxinc/nginx-unprivileged:stable"}, Plan{Builtin: true, Name: "nginxinc/nginx-unprivileged"}},

		// serve_hostname under all its names.
		{"serve_hostname", Spec{Image: "registry.k8s.io/serve_hostname"}, Plan{Builtin: true, Name: hostname}},
		{"serve_hostname on k8s.gcr.io", Spec{Image: "k8s.gcr.io/serve_hostname:1.1"}, Plan{Builtin: true, Name: hostname}},
		{"serve_hostname on gcr.io", Spec{Image: "gcr.io/google_containers/serve_hostname:v1.4"}, Plan{Builtin: true, Name: hostname}},
		{"minikit/serve-hostname", Spec{Image: "minikit/serve-hostname"}, Plan{Builtin: true, Name: hostname}},
		{"serve_hostname flags",
			Spec{Image: "registry.k8s.io/serve_hostname", Args: []string{"-udp", "-http=false"}},
			Plan{Builtin: true, Name: hostname, Argv: []string{"-udp", "-http=false"}}},

		// agnhost: the subcommand comes from args, or from a command naming /agnhost.
		{"agnhost args",
			Spec{Image: "registry.k8s.io/e2e-test-images/agnhost:2.39", Args: []string{"netexec", "--http-port=8080"}},
			Plan{Builtin: true, Name: agnhost, Argv: []string{"netexec", "--http-port=8080"}}},
		{"agnhost command",
			Spec{Image: "registry.k8s.io/e2e-test-images/agnhost:2.40", Command: []string{"/agnhost", "netexec"}, Args: []string{"--http-port", "8080"}},
			Plan{Builtin: true, Name: agnhost, Argv: []string{"netexec", "--http-port", "8080"}}},
		{"agnhost on old gcr.io",
			Spec{Image: "gcr.io/kubernetes-e2e-test-images/agnhost:2.2", Args: []string{"pause"}},
			Plan{Builtin: true, Name: agnhost, Argv: []string{"pause"}}},
		// The conformance specs' agnhost containers (test/utils/image/manifest.go: 2.66.1, prev 2.55).
		{"agnhost with neither command nor args runs its CMD, pause",
			Spec{Image: "registry.k8s.io/e2e-test-images/agnhost:2.66.1"},
			Plan{Builtin: true, Name: agnhost, Argv: []string{"pause"}}},
		{"agnhost command without args prints its help",
			Spec{Image: "registry.k8s.io/e2e-test-images/agnhost:2.55", Command: []string{"/agnhost"}},
			Plan{Builtin: true, Name: agnhost}},
		{"agnhost serve-hostname as the service jig runs it",
			Spec{Image: "registry.k8s.io/e2e-test-images/agnhost:2.66.1", Command: []string{"/agnhost", "serve-hostname", "--http=false", "--tcp", "--udp"}},
			Plan{Builtin: true, Name: agnhost, Argv: []string{"serve-hostname", "--http=false", "--tcp", "--udp"}}},
		{"agnhost porter as the proxy specs run it",
			Spec{Image: "registry.k8s.io/e2e-test-images/agnhost:2.66.1", Command: []string{"/agnhost", "porter", "--json-response"}},
			Plan{Builtin: true, Name: agnhost, Argv: []string{"porter", "--json-response"}}},
		{"agnhost DNS querier script runs on the host",
			Spec{Image: "registry.k8s.io/e2e-test-images/agnhost:2.66.1", Command: []string{"sh", "-c", "for i in `seq 1 600`; do sleep 1; done"}},
			Plan{Argv: []string{"sh", "-c", "for i in `seq 1 600`; do sleep 1; done"}}},
		{"agnhost's bundled coredns runs the coredns image",
			Spec{Image: "registry.k8s.io/e2e-test-images/agnhost:2.66.1", Command: []string{"/coredns"}, Args: []string{"-conf", "/etc/coredns/Corefile"}},
			Plan{Builtin: true, Name: "registry.k8s.io/coredns/coredns", Argv: []string{"-conf", "/etc/coredns/Corefile"}}},
		{"the coredns image",
			Spec{Image: "registry.k8s.io/coredns/coredns:v1.12.0", Args: []string{"-conf", "/etc/coredns/Corefile"}},
			Plan{Builtin: true, Name: "registry.k8s.io/coredns/coredns", Argv: []string{"-conf", "/etc/coredns/Corefile"}}},
		{"agnhost with a shell command runs on the host",
			Spec{Image: "registry.k8s.io/e2e-test-images/agnhost:2.39", Command: []string{"sh", "-c", "sleep 5"}},
			Plan{Argv: []string{"sh", "-c", "sleep 5"}}},

		// nginxdemos: the tag picks plain text.
		{"nginxdemos/hello", Spec{Image: "nginxdemos/hello"}, Plan{Builtin: true, Name: "nginxdemos/hello"}},
		{"nginxdemos/hello:plain-text", Spec{Image: "nginxdemos/hello:plain-text"}, Plan{Builtin: true, Name: "nginxdemos/hello:plain-text"}},
		{"nginxdemos/hello versioned plain-text", Spec{Image: "nginxdemos/hello:0.4-plain-text"}, Plan{Builtin: true, Name: "nginxdemos/hello:plain-text"}},
		{"nginxdemos/nginx-hello", Spec{Image: "nginxdemos/nginx-hello"}, Plan{Builtin: true, Name: "nginxdemos/nginx-hello"}},
		{"nginxdemos/nginx-hello:plain-text", Spec{Image: "nginxdemos/nginx-hello:plain-text"}, Plan{Builtin: true, Name: "nginxdemos/nginx-hello:plain-text"}},
		{"nginxdemos/hello-nonroot:plain-text", Spec{Image: "nginxdemos/hello-nonroot:plain-text"}, Plan{Builtin: true, Name: "nginxdemos/nginx-hello:plain-text"}},

		{"pause", Spec{Image: "registry.k8s.io/pause:3.10"}, Plan{Builtin: true, Name: "registry.k8s.io/pause"}},
		{"pause 3.10.2", Spec{Image: "registry.k8s.io/pause:3.10.2"}, Plan{Builtin: true, Name: "registry.k8s.io/pause"}},

		// The e2e suite's nginx images are nginx; httpd is "It works!".
		{"e2e nginx", Spec{Image: "registry.k8s.io/e2e-test-images/nginx:1.27.0-2"}, Plan{Builtin: true, Name: "nginx"}},
		{"e2e nginx new", Spec{Image: "registry.k8s.io/e2e-test-images/nginx:1.28.0-2"}, Plan{Builtin: true, Name: "nginx"}},
		{"httpd", Spec{Image: "httpd:2.4.38-alpine"}, Plan{Builtin: true, Name: "httpd"}},
		{"e2e httpd", Spec{Image: "registry.k8s.io/e2e-test-images/httpd:2.4.39-4"}, Plan{Builtin: true, Name: "httpd"}},
		{"httpd args that are a command replace its CMD",
			Spec{Image: "httpd", Args: []string{"sh", "-c", "sleep 1"}},
			Plan{Argv: []string{"sh", "-c", "sleep 1"}}},
		{"httpd args starting httpd-foreground",
			Spec{Image: "httpd", Args: []string{"httpd-foreground"}},
			Plan{Builtin: true, Name: "httpd", Argv: []string{"httpd-foreground"}}},
		{"minikit/echo with a port", Spec{Image: "minikit/echo", Args: []string{"--port=9000"}},
			Plan{Builtin: true, Name: "minikit/echo", Argv: []string{"--port=9000"}}},
		{"minikit/echo command is not its entrypoint",
			Spec{Image: "minikit/echo", Command: []string{"echo", "hi"}},
			Plan{Argv: []string{"echo", "hi"}}},

		// Shell images run the host's programs with the image's default CMD.
		{"busybox default CMD", Spec{Image: "busybox"}, Plan{Argv: []string{"sh"}}},
		{"busybox with command",
			Spec{Image: "busybox:1.28", Command: []string{"sleep", "3600"}},
			Plan{Argv: []string{"sleep", "3600"}}},
		{"busybox args replace CMD",
			Spec{Image: "docker.io/library/busybox:1.36", Args: []string{"sleep", "3600"}},
			Plan{Argv: []string{"sleep", "3600"}}},
		{"alpine default CMD", Spec{Image: "alpine:3.20"}, Plan{Argv: []string{"/bin/sh"}}},
		{"ubuntu default CMD", Spec{Image: "ubuntu:24.04"}, Plan{Argv: []string{"/bin/bash"}}},
		{"debian default CMD", Spec{Image: "debian:bookworm"}, Plan{Argv: []string{"bash"}}},

		{"e2e busybox default CMD", Spec{Image: "registry.k8s.io/e2e-test-images/busybox:1.37.0-2"}, Plan{Argv: []string{"sh"}}},
		{"e2e busybox args", Spec{Image: "registry.k8s.io/e2e-test-images/busybox:1.37.0-2", Args: []string{"sleep", "10"}},
			Plan{Argv: []string{"sleep", "10"}}},
		{"jessie-dnsutils with a command",
			Spec{Image: "registry.k8s.io/e2e-test-images/jessie-dnsutils:1.7", Command: []string{"sleep", "infinity"}},
			Plan{Argv: []string{"sleep", "infinity"}}},
		{"jessie-dnsutils default CMD", Spec{Image: "registry.k8s.io/e2e-test-images/jessie-dnsutils:1.7"}, Plan{Argv: []string{"bash"}}},
		{"glibc-dns-testing querier script",
			Spec{Image: "registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1", Command: []string{"sh", "-c", "dig +short x"}},
			Plan{Argv: []string{"sh", "-c", "dig +short x"}}},
		{"unknown image, command and args",
			Spec{Image: "curlimages/curl", Command: []string{"curl"}, Args: []string{"-s", "http://web"}},
			Plan{Argv: []string{"curl", "-s", "http://web"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Resolve(tt.spec)
			if err != nil {
				t.Fatalf("Resolve(%+v): %v", tt.spec, err)
			}
			if got.Builtin != tt.want.Builtin || got.Name != tt.want.Name || !slices.Equal(got.Argv, tt.want.Argv) {
				t.Errorf("Resolve(%+v) = %+v, want %+v", tt.spec, got, tt.want)
			}
			if got.Builtin && !slices.Contains(Names(), got.Name) {
				t.Errorf("Resolve(%+v) named %q, which Names does not list", tt.spec, got.Name)
			}
		})
	}
}

func TestResolveExec(t *testing.T) {
	const agnhost = "registry.k8s.io/e2e-test-images/agnhost"
	tests := []struct {
		name   string
		image  string
		argv   []string
		want   Plan
		wantOK bool
	}{
		{"agnhost dns-suffix", "registry.k8s.io/e2e-test-images/agnhost:2.66.1", []string{"/agnhost", "dns-suffix"},
			Plan{Builtin: true, Name: agnhost, Argv: []string{"dns-suffix"}}, true},
		{"agnhost connect", "registry.k8s.io/e2e-test-images/agnhost:2.55",
			[]string{"/agnhost", "connect", "10.96.0.1:80", "--timeout=3s", "--protocol=tcp"},
			Plan{Builtin: true, Name: agnhost, Argv: []string{"connect", "10.96.0.1:80", "--timeout=3s", "--protocol=tcp"}}, true},
		{"agnhost-2", "registry.k8s.io/e2e-test-images/agnhost:2.66.1", []string{"/agnhost-2", "etc-hosts"},
			Plan{Builtin: true, Name: agnhost, Argv: []string{"etc-hosts"}}, true},
		{"agnhost alone", "registry.k8s.io/e2e-test-images/agnhost:2.66.1", []string{"/agnhost"},
			Plan{Builtin: true, Name: agnhost, Argv: []string{}}, true},
		{"a shell in agnhost runs on the host", "registry.k8s.io/e2e-test-images/agnhost:2.66.1",
			[]string{"/bin/sh", "-x", "-c", "curl -q -s http://10.96.0.5/"}, Plan{}, false},
		{"a shell running only the program is the program", "registry.k8s.io/e2e-test-images/agnhost:2.66.1",
			[]string{"/bin/sh", "-x", "-c", "/agnhost connect --timeout=3s no-pods:80"},
			Plan{Builtin: true, Name: agnhost, Argv: []string{"connect", "--timeout=3s", "no-pods:80"}}, true},
		{"sh -c with the program and a pipe runs on the host", "registry.k8s.io/e2e-test-images/agnhost:2.66.1",
			[]string{"sh", "-c", "/agnhost connect no-pods:80 | cat"}, Plan{}, false},
		{"sh -c with a variable runs on the host", "registry.k8s.io/e2e-test-images/agnhost:2.66.1",
			[]string{"sh", "-c", "/agnhost connect $ADDR"}, Plan{}, false},
		{"sh -c with a quoted word runs on the host", "registry.k8s.io/e2e-test-images/agnhost:2.66.1",
			[]string{"sh", "-c", "/agnhost connect 'a b'"}, Plan{}, false},
		{"sh -c with extra positional args runs on the host", "registry.k8s.io/e2e-test-images/agnhost:2.66.1",
			[]string{"sh", "-c", "/agnhost dns-suffix", "arg0"}, Plan{}, false},
		{"a simple shell command of another program runs on the host", "registry.k8s.io/e2e-test-images/agnhost:2.66.1",
			[]string{"/bin/sh", "-c", "hostname"}, Plan{}, false},
		{"a relative agnhost is not the image's path", "registry.k8s.io/e2e-test-images/agnhost:2.66.1",
			[]string{"agnhost", "dns-suffix"}, Plan{}, false},
		{"hostname in agnhost runs on the host", "registry.k8s.io/e2e-test-images/agnhost:2.66.1", []string{"hostname"}, Plan{}, false},
		{"/agnhost in another image is the host's", "registry.k8s.io/e2e-test-images/busybox:1.37.0-2",
			[]string{"/agnhost", "dns-suffix"}, Plan{}, false},
		{"nginx in the nginx image is not re-run", "nginx", []string{"nginx", "-s", "reload"}, Plan{}, false},
		{"serve_hostname", "registry.k8s.io/serve_hostname:1.1", []string{"/serve_hostname", "-port=9000"},
			Plan{Builtin: true, Name: "registry.k8s.io/serve_hostname", Argv: []string{"-port=9000"}}, true},
		{"empty argv", "registry.k8s.io/e2e-test-images/agnhost:2.66.1", nil, Plan{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ResolveExec(tt.image, tt.argv)
			if ok != tt.wantOK || got.Builtin != tt.want.Builtin || got.Name != tt.want.Name || !slices.Equal(got.Argv, tt.want.Argv) {
				t.Errorf("ResolveExec(%q, %q) = %+v, %v; want %+v, %v", tt.image, tt.argv, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestResolveErrors(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		want string
	}{
		{"unknown image without command", Spec{Image: "foo/bar:1"},
			`image "foo/bar:1" is not a built-in image of minikit and has no command; built-in images: ` + strings.Join(Names(), ", ")},
		{"unknown image with only args", Spec{Image: "foo/bar:1", Args: []string{"--flag"}},
			`image "foo/bar:1" is not a built-in image of minikit and has no command; built-in images: `},
		{"no image", Spec{}, "container has no image"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Resolve(tt.spec)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("Resolve(%+v) error = %v, want prefix %q", tt.spec, err, tt.want)
			}
		})
	}
}

// Every canonical name resolves to itself, so `minikit __image-run NAME` and
// Plan.Name agree.
func TestNamesResolveToThemselves(t *testing.T) {
	for _, name := range Names() {
		p, err := Resolve(Spec{Image: name})
		if err != nil || !p.Builtin || p.Name != name {
			t.Errorf("Resolve(%q) = %+v, %v; want built-in %q", name, p, err, name)
		}
	}
}

func TestParseRef(t *testing.T) {
	tests := []struct {
		image string
		want  ref
	}{
		{"nginx", ref{repo: "nginx"}},
		{"nginx:1.27", ref{repo: "nginx", tag: "1.27"}},
		{"library/nginx", ref{repo: "nginx"}},
		{"docker.io/library/nginx:latest", ref{repo: "nginx", tag: "latest"}},
		{"localhost/nginx", ref{repo: "nginx"}},
		{"localhost:5000/team/app:v1", ref{repo: "team/app", tag: "v1"}},
		{"registry.k8s.io/e2e-test-images/agnhost:2.39", ref{repo: "e2e-test-images/agnhost", tag: "2.39"}},
		{"nginxdemos/hello:plain-text@sha256:ab", ref{repo: "nginxdemos/hello", tag: "plain-text"}},
	}
	for _, tt := range tests {
		if got := parseRef(tt.image); got != tt.want {
			t.Errorf("parseRef(%q) = %+v, want %+v", tt.image, got, tt.want)
		}
	}
}
