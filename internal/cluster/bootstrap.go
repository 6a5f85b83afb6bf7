package cluster

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/minikit/minikit/internal/fsutil"
)

// A server of an HA control plane hands the cluster's shared secrets to a
// server that joins it, as k3s does (its /cacerts and /v1-k3s/server-bootstrap):
//
//   - GET /cacerts, unauthenticated, is the cluster CA certificate, so that a
//     joiner holding the full join token can check it against the hash the
//     token carries before it sends the token anywhere;
//   - GET /v1-minikit/server-bootstrap with the cluster token as bearer is the
//     CA's certificate and key (each server issues its own serving and etcd
//     certificates from it), the service-account signing key (a token any
//     server issued is valid on every other), the token itself, the etcd
//     members' client URLs and the cluster's ranges.
//
// The join token is k3s's secure format, K10<sha256 of the CA PEM>::server:<token>;
// a server with an embedded etcd writes it to DATA_DIR/server-token.
const (
	caCertsPath   = "/cacerts"
	bootstrapPath = "/v1-minikit/server-bootstrap"
)

// bootstrapData is what a joining server receives.
type bootstrapData struct {
	CACert      string   `json:"caCert"`
	CAKey       string   `json:"caKey"`
	SAKey       string   `json:"serviceAccountKey"`
	Token       string   `json:"token"`
	EtcdMembers []string `json:"etcdMembers"`
	ServiceCIDR string   `json:"serviceCIDR"`
	PodCIDR     string   `json:"podCIDR"`
}

// JoinToken is the secure join token for a cluster whose CA is caPEM.
func JoinToken(caPEM []byte, token string) string {
	sum := sha256.Sum256(caPEM)
	return "K10" + hex.EncodeToString(sum[:]) + "::server:" + token
}

// parseJoinToken splits a join token into the CA hash it pins (empty for a
// bare token) and the cluster token.
func parseJoinToken(s string) (caHash, token string, err error) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "K10") {
		return "", s, nil
	}
	hash, rest, ok := strings.Cut(strings.TrimPrefix(s, "K10"), "::")
	if !ok || len(hash) != 64 {
		return "", "", errors.New("a K10 token is K10<64 hex digits of the CA's sha256>::server:<token>")
	}
	if _, err := hex.DecodeString(hash); err != nil {
		return "", "", fmt.Errorf("a K10 token's CA hash: %w", err)
	}
	user, tok, ok := strings.Cut(rest, ":")
	if !ok || user != "server" || tok == "" {
		return "", "", errors.New("a K10 token ends ::server:<token>")
	}
	return hash, tok, nil
}

// bootstrapHandler serves /cacerts and the bootstrap data in front of next.
// data is called per request (the member list changes as servers join).
func bootstrapHandler(next http.Handler, caPEM []byte, token string, data func() (bootstrapData, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case caCertsPath:
			w.Header().Set("Content-Type", "application/x-pem-file")
			w.Write(caPEM)
		case bootstrapPath:
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
				// Only the cluster token opens this: a service account's token
				// must not be able to read the CA key.
				http.Error(w, "the server bootstrap needs the cluster token (the first server's DATA_DIR/token)", http.StatusUnauthorized)
				return
			}
			d, err := data()
			if err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(d)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// fetchBootstrap asks the server at join for the cluster's shared secrets.
// The server's CA is pinned by the token's hash, or read from caFile.
func fetchBootstrap(ctx context.Context, join, joinToken, caFile string) (bootstrapData, []byte, error) {
	var d bootstrapData
	u, err := url.Parse(join)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return d, nil, fmt.Errorf("--join must be the https:// URL of a server of the cluster, got %q", join)
	}
	hash, token, err := parseJoinToken(joinToken)
	if err != nil {
		return d, nil, fmt.Errorf("parsing the join token: %w", err)
	}
	if token == "" {
		return d, nil, errors.New("joining needs the cluster's token: --token or --token-file (the first server's DATA_DIR/server-token)")
	}
	var caPEM []byte
	switch {
	case hash != "":
		// The CA is fetched without verification and accepted only if it
		// hashes to what the token pins: nothing secret is sent before that.
		insecure := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		if caPEM, err = get(ctx, insecure, join+caCertsPath, ""); err != nil {
			return d, nil, err
		}
		sum := sha256.Sum256(caPEM)
		if hex.EncodeToString(sum[:]) != hash {
			return d, nil, fmt.Errorf("the CA of %s does not match the join token's hash: not the cluster the token is for", join)
		}
	case caFile != "":
		if caPEM, err = os.ReadFile(caFile); err != nil {
			return d, nil, fmt.Errorf("reading --ca-file: %w", err)
		}
	default:
		return d, nil, errors.New("a bare token cannot authenticate the server: pass the K10 join token " +
			"(the first server's DATA_DIR/server-token) or --ca-file with its DATA_DIR/tls/ca.crt")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return d, nil, fmt.Errorf("the CA of %s is not a PEM certificate", join)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	body, err := get(ctx, client, join+bootstrapPath, token)
	if err != nil {
		return d, nil, err
	}
	if err := json.Unmarshal(body, &d); err != nil {
		return d, nil, fmt.Errorf("decoding the bootstrap data of %s: %w", join, err)
	}
	if d.CACert != string(caPEM) {
		return d, nil, fmt.Errorf("%s handed out a CA other than the one it serves with", join)
	}
	return d, caPEM, nil
}

func get(ctx context.Context, c *http.Client, u, token string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("joining: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("joining: reading %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("joining: %s answered %s: %s", u, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// writeBootstrap stores the shared secrets in a joiner's data dir where the
// single-server code finds them: ensureTLS then issues this server's own
// serving certificate from the cluster CA, and ensureToken and
// ensureServiceAccountKey read the cluster's.
func writeBootstrap(dataDir string, d bootstrapData) error {
	dir := filepath.Join(dataDir, "tls")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, f := range []struct {
		path string
		data string
		mode os.FileMode
	}{
		{filepath.Join(dir, "ca.crt"), d.CACert, 0o644},
		{filepath.Join(dir, "ca.key"), d.CAKey, 0o600},
		{filepath.Join(dataDir, "sa.key"), d.SAKey, 0o600},
		{filepath.Join(dataDir, "token"), d.Token + "\n", 0o600},
	} {
		if strings.TrimSpace(f.data) == "" {
			return fmt.Errorf("the bootstrap data has no %s", filepath.Base(f.path))
		}
		if err := fsutil.WriteFileAtomic(f.path, []byte(f.data), f.mode); err != nil {
			return fmt.Errorf("writing %s: %w", f.path, err)
		}
	}
	return nil
}
