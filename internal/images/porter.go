package images

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// porter is agnhost porter, the server of the e2e proxy specs: every
// SERVE_PORT_N (or SERVE_TCP_PORT_N) variable serves its value over HTTP on
// port N, SERVE_TLS_PORT_N over HTTPS and SERVE_UDP_PORT_N as the reply to
// any datagram. --json-response answers {"Method": ..., "Body": value}
// instead. The real image bakes in a localhost certificate (CERT_FILE and
// KEY_FILE override it); minikit generates a self-signed one when they are
// unset.
func porter(ctx context.Context, c *container, args []string) error {
	fs := c.agnhostFlags("porter")
	jsonResp := fs.Bool("json-response", false, "Responds to requests with a json response that includes the default value with the http.Request Method")
	if _, err := c.parseAgnhost(fs, args, 0, 0); err != nil {
		return err
	}
	log := c.logger()
	var servers []server
	var tlsCfg *tls.Config
	keys := make([]string, 0, len(c.env))
	for k := range c.env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		value := c.env[key]
		kind, portStr := "", ""
		for _, p := range []struct{ prefix, kind string }{
			{"SERVE_PORT_", "tcp"}, {"SERVE_TCP_PORT_", "tcp"}, {"SERVE_TLS_PORT_", "tls"},
			{"SERVE_UDP_PORT_", "udp"}, {"SERVE_SCTP_PORT_", "sctp"},
		} {
			if rest, ok := strings.CutPrefix(key, p.prefix); ok {
				kind, portStr = p.kind, rest
				break
			}
		}
		if kind == "" {
			continue
		}
		port, err := strconv.Atoi(portStr)
		if err != nil {
			return fmt.Errorf("parsing the port of %s: %w", key, err)
		}
		if err := checkPort(key, port); err != nil {
			return err
		}
		switch kind {
		case "sctp":
			log.Printf("SCTP is not supported by minikit; ignoring %s", key)
		case "udp":
			conn, err := c.listenUDP(c.listenHost, port)
			if err != nil {
				return err
			}
			log.Printf("Started UDP server on port %d", port)
			reply := []byte(value)
			servers = append(servers, &udpServer{conn: conn, handle: func([]byte, *net.UDPAddr) []byte { return reply }})
		case "tcp", "tls":
			ln, err := c.listenTCP(c.listenHost, port)
			if err != nil {
				return err
			}
			if kind == "tls" {
				if tlsCfg == nil {
					if tlsCfg, err = porterTLS(c.env["CERT_FILE"], c.env["KEY_FILE"]); err != nil {
						return err
					}
				}
				ln = tls.NewListener(ln, tlsCfg)
			}
			servers = append(servers, c.httpServer(ln, porterHandler(value, *jsonResp)))
		}
	}
	return c.serve(ctx, servers...)
}

func porterHandler(value string, jsonResp bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !jsonResp {
			fmt.Fprint(w, value)
			return
		}
		j, err := json.Marshal(struct{ Method, Body string }{r.Method, value})
		if err != nil {
			http.Error(w, fmt.Sprintf("Internal Server Error: %v", err), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(j)
	})
}

// porterTLS loads CERT_FILE and KEY_FILE, or makes a self-signed certificate
// for localhost, 127.0.0.1 and ::1 like the one the real image ships.
func porterTLS(certFile, keyFile string) (*tls.Config, error) {
	if certFile != "" || keyFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("loading CERT_FILE %q and KEY_FILE %q: %w", certFile, keyFile, err)
		}
		return &tls.Config{Certificates: []tls.Certificate{cert}}, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{Organization: []string{"Acme Co"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(10, 0, 0),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}, nil
}
