package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/lab"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeKubeconfig writes a kubeconfig whose current context is ctx, on server.
func writeKubeconfig(t *testing.T, path, ctx, server string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: server}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	cfg.Contexts[ctx] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = ctx
	os.MkdirAll(filepath.Dir(path), 0o755)
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestFindCluster(t *testing.T) {
	dir := t.TempDir()
	labA := lab.Entry{Name: "a", Dir: dir + "/a", Kubeconfig: writeKubeconfig(t, dir+"/a/kubeconfig", "minikit-a", "https://127.0.0.1:40001"), APIPort: 40001}
	labB := lab.Entry{Name: "b", Dir: dir + "/b", Kubeconfig: writeKubeconfig(t, dir+"/b/kubeconfig", "minikit-b", "https://127.0.0.1:40002"), APIPort: 40002}
	local := writeKubeconfig(t, dir+"/server/kubeconfig", "minikit", "http://127.0.0.1:6443")
	home := dir + "/home"
	userOn := func(ctx string) func() (*lab.User, error) {
		return func() (*lab.User, error) {
			if ctx != "" {
				writeKubeconfig(t, home+"/.kube/config", ctx, "https://127.0.0.1:40002")
			} else {
				os.RemoveAll(home)
			}
			return &lab.User{Name: "student", UID: 1000, GID: 1000, Home: home}, nil
		}
	}
	// A kubeconfig of nobody's lab whose server is lab b's forwarder.
	byURL := writeKubeconfig(t, dir+"/other/kubeconfig", "whatever", "https://127.0.0.1:40002/")
	for _, tc := range []struct {
		name       string
		kubeconfig string // --kubeconfig
		env        string // KUBECONFIG
		labFlag    string // --lab
		userCtx    string // current context of the user's ~/.kube/config ("" none)
		labs       []lab.Entry
		localKC    bool
		want       target
		wantErr    string
	}{
		{name: "--kubeconfig first", kubeconfig: labA.Kubeconfig, env: labB.Kubeconfig, labs: []lab.Entry{labA, labB},
			want: target{kubeconfig: labA.Kubeconfig, lab: "a"}},
		{name: "KUBECONFIG next", env: labB.Kubeconfig, labFlag: "a", labs: []lab.Entry{labA, labB},
			want: target{kubeconfig: "", lab: "b"}},
		{name: "the lab a kubeconfig's server URL is", kubeconfig: byURL, labs: []lab.Entry{labA, labB},
			want: target{kubeconfig: byURL, lab: "b"}},
		{name: "a kubeconfig of no lab", kubeconfig: local, labs: []lab.Entry{labA},
			want: target{kubeconfig: local, lab: ""}},
		{name: "--lab", labFlag: "a", userCtx: "minikit-b", labs: []lab.Entry{labA, labB},
			want: target{kubeconfig: labA.Kubeconfig, lab: "a"}},
		{name: "--lab of no lab", labFlag: "c", labs: []lab.Entry{labA, labB},
			wantErr: `no lab "c" on this machine; labs: a (` + labA.Dir + `), b (` + labB.Dir + `)`},
		{name: "the user's current context minikit-b, under sudo", userCtx: "minikit-b", labs: []lab.Entry{labA, labB},
			want: target{kubeconfig: home + "/.kube/config", lab: "b"}},
		{name: "the user's current context names a lab that is gone", userCtx: "minikit-c", labs: []lab.Entry{labA},
			want: target{kubeconfig: labA.Kubeconfig, lab: "a"}},
		{name: "the only lab", userCtx: "kind-dev", labs: []lab.Entry{labB}, localKC: true,
			want: target{kubeconfig: labB.Kubeconfig, lab: "b"}},
		{name: "several labs", labs: []lab.Entry{labA, labB}, localKC: true,
			wantErr: "2 labs run on this machine; choose one with --lab NAME"},
		{name: "the local server", localKC: true,
			want: target{kubeconfig: local}},
		{name: "nothing", wantErr: errNoCluster.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", tc.env)
			f := finder{
				getenv: os.Getenv,
				user:   userOn(tc.userCtx),
				lookup: func(name string) (lab.Entry, bool) {
					for _, e := range tc.labs {
						if e.Name == name {
							return e, true
						}
					}
					return lab.Entry{}, false
				},
				registered: func() []lab.Entry { return tc.labs },
				exists:     func(p string) bool { _, err := os.Stat(p); return err == nil },
				localKC:    dir + "/no-server",
			}
			if tc.localKC {
				f.localKC = local
			}
			got, err := f.find(tc.kubeconfig, tc.labFlag)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("find: %+v, %v; want error %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.kubeconfig != tc.want.kubeconfig || got.lab != tc.want.lab {
				t.Errorf("find = kubeconfig %q lab %q (%s); want %q %q", got.kubeconfig, got.lab, got.how, tc.want.kubeconfig, tc.want.lab)
			}
		})
	}
}

func TestCutLabFlag(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		rest string
		lab  string
	}{
		{[]string{"get", "pods", "--lab", "a", "-o", "wide"}, "get pods -o wide", "a"},
		{[]string{"get", "--lab=b", "pods"}, "get pods", "b"},
		{[]string{"exec", "p", "--", "x", "--lab", "c"}, "exec p -- x --lab c", ""},
	} {
		rest, name := cutLabFlag(tc.in)
		if strings.Join(rest, " ") != tc.rest || name != tc.lab {
			t.Errorf("cutLabFlag(%q) = %q, %q; want %q, %q", tc.in, rest, name, tc.rest, tc.lab)
		}
	}
}
