package lab

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/minikit/minikit/internal/kubeconfig"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// User is whoever ran `sudo minikit lab up`: the lab's kubeconfig is theirs
// and its context is merged into their ~/.kube/config, so kubectl works from
// their shell without sudo.
type User struct {
	Name     string
	UID, GID int
	Home     string
}

// InvokingUser is the user behind sudo (SUDO_USER, SUDO_UID, SUDO_GID), or
// the current user when there is no sudo.
func InvokingUser() (*User, error) {
	if name := os.Getenv("SUDO_USER"); name != "" && name != "root" {
		u := &User{Name: name, UID: -1, GID: -1}
		if v, err := strconv.Atoi(os.Getenv("SUDO_UID")); err == nil {
			u.UID = v
		}
		if v, err := strconv.Atoi(os.Getenv("SUDO_GID")); err == nil {
			u.GID = v
		}
		pw, err := user.Lookup(name)
		if err != nil {
			if u.UID < 0 {
				return nil, fmt.Errorf("looking up SUDO_USER %q: %w", name, err)
			}
		} else {
			u.Home = pw.HomeDir
			if u.UID < 0 {
				u.UID, _ = strconv.Atoi(pw.Uid)
			}
			if u.GID < 0 {
				u.GID, _ = strconv.Atoi(pw.Gid)
			}
		}
		return u, nil
	}
	pw, err := user.Current()
	if err != nil {
		return nil, fmt.Errorf("looking up the current user: %w", err)
	}
	uid, _ := strconv.Atoi(pw.Uid)
	gid, _ := strconv.Atoi(pw.Gid)
	home := pw.HomeDir
	if h := os.Getenv("HOME"); h != "" {
		home = h
	}
	return &User{Name: pw.Username, UID: uid, GID: gid, Home: home}, nil
}

// KubeconfigPath is the user's ~/.kube/config ("" without a home directory).
func (u *User) KubeconfigPath() string {
	if u == nil || u.Home == "" {
		return ""
	}
	return filepath.Join(u.Home, clientcmd.RecommendedHomeDir, clientcmd.RecommendedFileName)
}

// ContextName is the context, cluster and user name of lab name in a
// kubeconfig, after kind's kind-NAME.
func ContextName(name string) string { return "minikit-" + name }

// LabFromContext is the lab a context name minikit-NAME stands for.
func LabFromContext(context string) (string, bool) {
	const p = "minikit-"
	if len(context) > len(p) && context[:len(p)] == p {
		return context[len(p):], true
	}
	return "", false
}

// labKubeconfig is a lab's kubeconfig: cluster, user and context all named
// minikit-NAME, the context current.
func labKubeconfig(name, server, token string, ca []byte) *clientcmdapi.Config {
	n := ContextName(name)
	return kubeconfig.New(kubeconfig.Params{Cluster: n, User: n, Context: n, Server: server, CA: ca, Token: token, Namespace: "default"})
}

// userKubeconfig resolves a user's kubeconfig path for root to write: a
// symlink is followed (dotfile setups link it), and the file and its
// directory must belong to the user, so that running as root never writes
// anything the user could not have written.
func userKubeconfig(path string, uid int) (real string, exists bool, err error) {
	real = path
	if r, err := filepath.EvalSymlinks(path); err == nil {
		real = r
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", false, err
	}
	check := func(p string) (bool, error) {
		st, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && uid >= 0 && int(sys.Uid) != uid {
			return true, fmt.Errorf("%s belongs to uid %d, not to uid %d whose kubeconfig it is", p, sys.Uid, uid)
		}
		return true, nil
	}
	if exists, err = check(real); err != nil {
		return "", false, err
	}
	if _, err := check(filepath.Dir(real)); err != nil {
		return "", false, err
	}
	return real, exists, nil
}

// MergeKubeconfig adds lab's cluster, user and context (all minikit-NAME)
// from the lab's kubeconfig src into the kubeconfig at path, owned by uid:gid
// (created with its directory when missing), and makes the context current,
// as kind does. It returns the current context it replaced, for
// UnmergeKubeconfig to restore.
func MergeKubeconfig(path string, src *clientcmdapi.Config, name string, uid, gid int) (prev string, err error) {
	real, exists, err := userKubeconfig(path, uid)
	if err != nil {
		return "", fmt.Errorf("merging lab %q into %s: %w", name, path, err)
	}
	cfg := clientcmdapi.NewConfig()
	mode := fs.FileMode(0o600)
	if exists {
		if cfg, err = clientcmd.LoadFromFile(real); err != nil {
			return "", fmt.Errorf("merging lab %q into %s: %w", name, path, err)
		}
		if st, err := os.Stat(real); err == nil {
			mode = st.Mode().Perm()
		}
	} else if _, err := os.Stat(filepath.Dir(real)); errors.Is(err, fs.ErrNotExist) {
		dir := filepath.Dir(real)
		if err := os.Mkdir(dir, 0o750); err != nil {
			return "", fmt.Errorf("merging lab %q into %s: %w", name, path, err)
		}
		if uid >= 0 {
			if err := os.Chown(dir, uid, gid); err != nil {
				return "", fmt.Errorf("merging lab %q into %s: %w", name, path, err)
			}
		}
	}
	n := ContextName(name)
	if src.Clusters[n] == nil || src.AuthInfos[n] == nil || src.Contexts[n] == nil {
		return "", fmt.Errorf("merging lab %q into %s: the lab's kubeconfig lacks the cluster, user or context %s", name, path, n)
	}
	prev = cfg.CurrentContext
	if prev == n {
		prev = ""
	}
	cfg.Clusters[n] = src.Clusters[n]
	cfg.AuthInfos[n] = src.AuthInfos[n]
	cfg.Contexts[n] = src.Contexts[n]
	cfg.CurrentContext = n
	if err := kubeconfig.Write(real, cfg, mode, uid, gid); err != nil {
		return "", err
	}
	return prev, nil
}

// UnmergeKubeconfig removes lab name's cluster, user and context from the
// kubeconfig at path. When the lab's context is current, prev (what
// MergeKubeconfig replaced) becomes current again if it still exists, else
// none. A missing file or entry is not an error.
func UnmergeKubeconfig(path, name, prev string, uid int) error {
	real, exists, err := userKubeconfig(path, uid)
	if err != nil {
		return fmt.Errorf("removing lab %q from %s: %w", name, path, err)
	}
	if !exists {
		return nil
	}
	cfg, err := clientcmd.LoadFromFile(real)
	if err != nil {
		return fmt.Errorf("removing lab %q from %s: %w", name, path, err)
	}
	n := ContextName(name)
	if cfg.Clusters[n] == nil && cfg.AuthInfos[n] == nil && cfg.Contexts[n] == nil && cfg.CurrentContext != n {
		return nil
	}
	delete(cfg.Clusters, n)
	delete(cfg.AuthInfos, n)
	delete(cfg.Contexts, n)
	if cfg.CurrentContext == n {
		cfg.CurrentContext = ""
		if prev != "" && cfg.Contexts[prev] != nil {
			cfg.CurrentContext = prev
		}
	}
	st, err := os.Stat(real)
	if err != nil {
		return err
	}
	sys := st.Sys().(*syscall.Stat_t)
	return kubeconfig.Write(real, cfg, st.Mode().Perm(), int(sys.Uid), int(sys.Gid))
}

// reachable reports whether uid:gid can enter every directory above path
// (root can enter anything).
func reachable(path string, uid, gid int) bool {
	if uid == 0 {
		return true
	}
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		st, err := os.Stat(dir)
		if err != nil {
			return false
		}
		sys := st.Sys().(*syscall.Stat_t)
		m := st.Mode().Perm()
		ok := m&0o001 != 0 || (int(sys.Uid) == uid && m&0o100 != 0) || (int(sys.Gid) == gid && m&0o010 != 0)
		if !ok {
			return false
		}
		if dir == "/" || dir == "." {
			return true
		}
	}
}

// writeKubeconfig writes the lab's kubeconfig, owned by the lab's Owner when
// there is one.
func (l *Lab) writeKubeconfig(server, token string, ca []byte) error {
	uid, gid := -1, -1
	if o := l.cfg.Owner; o != nil {
		uid, gid = o.UID, o.GID
	}
	return kubeconfig.Write(l.Kubeconfig(), labKubeconfig(l.cfg.Name, server, token, ca), 0o600, uid, gid)
}

// mergeKubeconfig merges the lab's context into its Owner's ~/.kube/config
// and records that in the lab's state for Down.
func (l *Lab) mergeKubeconfig() error {
	o := l.cfg.Owner
	path := l.cfg.UserKubeconfig
	if path == "" {
		path = o.KubeconfigPath()
	}
	if path == "" {
		return fmt.Errorf("merging the lab's kubeconfig: user %s has no home directory (use --kubeconfig-merge=false)", o.Name)
	}
	src, err := clientcmd.LoadFromFile(l.Kubeconfig())
	if err != nil {
		return err
	}
	// Recorded first: a merge that fails half way is still undone by Down.
	l.state.UserKubeconfig, l.state.UserUID = path, o.UID
	if err := l.saveState(); err != nil {
		return err
	}
	prev, err := MergeKubeconfig(path, src, l.cfg.Name, o.UID, o.GID)
	if err != nil {
		return fmt.Errorf("%w (lab up --kubeconfig-merge=false leaves it alone)", err)
	}
	l.state.PrevContext = prev
	return l.saveState()
}

// UserKubeconfig is the user's kubeconfig the lab's context was merged into
// ("" when none).
func (l *Lab) UserKubeconfig() string { return l.state.UserKubeconfig }

// KubeconfigReachable reports whether the lab's Owner can open the lab's
// kubeconfig where it is (every directory above it enterable).
func (l *Lab) KubeconfigReachable() bool {
	o := l.cfg.Owner
	return o == nil || reachable(l.Kubeconfig(), o.UID, o.GID)
}
