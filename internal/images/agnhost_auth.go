package images

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"golang.org/x/sys/unix"
	"k8s.io/client-go/rest"
)

// The agnhost subcommands the [sig-auth] ServiceAccounts specs run: mounttest
// (what a mounted file is: its filesystem, mode, owner and content) and
// test-service-account-issuer-discovery (verify the pod's token with the
// issuer's OIDC discovery, through a third-party OIDC library as the real
// one does: go-oidc).

// mounttest is `agnhost mounttest`: each flag names a path to report on, in
// the real one's order and words; any failure makes it exit 1 after the rest
// have run. --file_content_in_loop and --retry_time are not implemented (no
// networking spec uses them) and are refused by name.
func mounttest(_ context.Context, c *container, args []string) error {
	fs := c.agnhostFlags("mounttest")
	fsType := fs.String("fs_type", "", "Path to print the fs type for")
	fileMode := fs.String("file_mode", "", "Path to print the mode bits of")
	filePerm := fs.String("file_perm", "", "Path to print the perms of")
	fileOwner := fs.String("file_owner", "", "Path to print the owning UID and GID of")
	newFiles := []struct {
		path *string
		perm os.FileMode
	}{
		{fs.String("new_file_0644", "", "Path to write to and read from with perm 0644"), 0o644},
		{fs.String("new_file_0666", "", "Path to write to and read from with perm 0666"), 0o666},
		{fs.String("new_file_0660", "", "Path to write to and read from with perm 0660"), 0o660},
		{fs.String("new_file_0777", "", "Path to write to and read from with perm 0777"), 0o777},
	}
	content := fs.String("file_content", "", "Path to read the file content from")
	inLoop := fs.String("file_content_in_loop", "", "Path to read the file content in loop from (not implemented by minikit)")
	if _, err := c.parseAgnhost(fs, args, 0, 0); err != nil {
		return err
	}
	if *inLoop != "" {
		return fmt.Errorf("mounttest: --file_content_in_loop is not implemented by minikit")
	}
	at := func(p string) string { return filepath.Join(c.root, p) }
	failed := false
	step := func(p string, f func(string) error) {
		if p != "" && f(p) != nil {
			failed = true
		}
	}
	step(*fsType, func(p string) error {
		var st unix.Statfs_t
		if err := unix.Statfs(at(p), &st); err != nil {
			fmt.Fprintf(c.stdout, "error from statfs(%q): %v\n", p, err)
			return err
		}
		name := strconv.FormatInt(int64(st.Type), 10)
		if st.Type == unix.TMPFS_MAGIC {
			name = "tmpfs"
		}
		fmt.Fprintf(c.stdout, "mount type of %q: %s\n", p, name)
		return nil
	})
	readContent := func(p string) error {
		b, err := os.ReadFile(at(p))
		if err != nil {
			fmt.Fprintf(c.stdout, "error reading file content for %q: %v\n", p, err)
			return err
		}
		fmt.Fprintf(c.stdout, "content of file %q: %v\n", p, string(b))
		return nil
	}
	for _, nf := range newFiles {
		step(*nf.path, func(p string) error {
			// The real one runs with umask 0; the mode is set explicitly
			// here so the process's umask does not matter.
			err := os.WriteFile(at(p), []byte("mount-tester new file\n"), nf.perm)
			if err == nil {
				err = os.Chmod(at(p), nf.perm)
			}
			if err != nil {
				fmt.Fprintf(c.stdout, "error writing new file %q: %v\n", p, err)
				return err
			}
			return readContent(p)
		})
	}
	stat := func(p string) (os.FileInfo, error) {
		fi, err := os.Stat(at(p))
		if err != nil {
			fmt.Fprintf(c.stdout, "error from Stat(%q): %v\n", p, err)
		}
		return fi, err
	}
	step(*fileMode, func(p string) error {
		fi, err := stat(p)
		if err == nil {
			fmt.Fprintf(c.stdout, "mode of file %q: %v\n", p, fi.Mode())
		}
		return err
	})
	step(*filePerm, func(p string) error {
		fi, err := stat(p)
		if err == nil {
			fmt.Fprintf(c.stdout, "perms of file %q: %v\n", p, fi.Mode().Perm())
		}
		return err
	})
	step(*fileOwner, func(p string) error {
		var st syscall.Stat_t
		if err := syscall.Stat(at(p), &st); err != nil {
			fmt.Fprintf(c.stdout, "error from stat(%q): %v\n", p, err)
			return err
		}
		fmt.Fprintf(c.stdout, "owner UID of %q: %v\n", p, st.Uid)
		fmt.Fprintf(c.stdout, "owner GID of %q: %v\n", p, st.Gid)
		return nil
	})
	step(*content, readContent)
	if failed {
		return &ExitError{Code: 1}
	}
	return nil
}

// serviceAccountDir is where the kubelet mounts a pod's own token, CA and
// namespace.
const serviceAccountDir = "var/run/secrets/kubernetes.io/serviceaccount"

// testIssuerDiscovery is `agnhost test-service-account-issuer-discovery`: it
// reads the token at --token-path, discovers its issuer through the API server
// (with the pod's own credentials, trusting only the cluster's CA), and
// verifies the token's signature, audience and expiry with the keys the
// discovery names; failing that, it tries once more without credentials, as
// for an issuer served outside the cluster. It exits 0 only when a
// verification succeeds, logging each step as the real one does.
func testIssuerDiscovery(ctx context.Context, c *container, args []string) error {
	fs := c.agnhostFlags("test-service-account-issuer-discovery")
	tokenPath := fs.String("token-path", "", "Path to read service account token from.")
	audience := fs.String("audience", "", "Audience to check on received token.")
	if _, err := c.parseAgnhost(fs, args, 0, 0); err != nil {
		return err
	}
	log := c.logger()
	fatal := func(err error) error {
		log.Print(err)
		return &ExitError{Code: 1}
	}
	raw, err := os.ReadFile(filepath.Join(c.root, *tokenPath))
	if err != nil {
		return fatal(err)
	}
	log.Print("OK: Got token")
	log.Print("validating with in-cluster discovery")
	inCluster, err := c.inClusterClient()
	if err != nil {
		return fatal(err)
	}
	err = validateIssuer(oidc.ClientContext(ctx, inCluster), log.Printf, string(raw), *audience)
	if err == nil {
		return nil
	}
	log.Print("failed to validate with in-cluster discovery: ", err)
	log.Print("falling back to validating with external discovery")
	if err := validateIssuer(oidc.ClientContext(ctx, &http.Client{Transport: http.DefaultTransport}), log.Printf, string(raw), *audience); err != nil {
		return fatal(err)
	}
	return nil
}

// inClusterClient is client-go's in-cluster configuration, read from the
// container's environment and root rather than the process's.
func (c *container) inClusterClient() (*http.Client, error) {
	host, port := c.env["KUBERNETES_SERVICE_HOST"], c.env["KUBERNETES_SERVICE_PORT"]
	if host == "" || port == "" {
		return nil, errors.New("unable to load in-cluster configuration, KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be defined")
	}
	dir := filepath.Join(c.root, serviceAccountDir)
	cfg := &rest.Config{
		Host:            "https://" + net.JoinHostPort(host, port),
		BearerTokenFile: filepath.Join(dir, "token"),
		TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(dir, "ca.crt")},
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("could not get roundtripper: %v", err)
	}
	return &http.Client{Transport: rt}, nil
}

// issuerClaims are the claims the real one prints.
type issuerClaims struct {
	jwt.Claims
	Kubernetes struct {
		Namespace      string `json:"namespace"`
		ServiceAccount struct {
			Name string `json:"name"`
			UID  string `json:"uid"`
		} `json:"serviceaccount"`
	} `json:"kubernetes.io"`
}

func validateIssuer(ctx context.Context, logf func(string, ...any), raw, audience string) error {
	tok, err := jwt.ParseSigned(raw, []jose.SignatureAlgorithm{jose.RS256, jose.ES256, jose.ES384, jose.ES512})
	if err != nil {
		return err
	}
	var unsafe issuerClaims
	if err := tok.UnsafeClaimsWithoutVerification(&unsafe); err != nil {
		return err
	}
	logf("OK: got issuer %s", unsafe.Issuer)
	logf("Full, not-validated claims: \n%#v", unsafe)
	provider, err := oidc.NewProvider(ctx, unsafe.Issuer)
	if err != nil {
		return err
	}
	logf("OK: Constructed OIDC provider for issuer %v", unsafe.Issuer)
	valid, err := provider.Verifier(&oidc.Config{
		ClientID:             audience,
		SupportedSigningAlgs: []string{oidc.RS256, oidc.ES256, oidc.ES384, oidc.ES512},
	}).Verify(ctx, raw)
	if err != nil {
		return err
	}
	logf("OK: Validated signature on JWT")
	var safe issuerClaims
	if err := valid.Claims(&safe); err != nil {
		return err
	}
	logf("OK: Got valid claims from token!")
	logf("Full, validated claims: \n%#v", &safe)
	return nil
}
