package store

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// EtcdConfig says how to reach the etcd that holds a minikit cluster's objects.
type EtcdConfig struct {
	// Endpoints are the client URLs of the etcd members: https://IP:2379 (http:// for a
	// plain local etcd).
	Endpoints []string
	// CAFile, CertFile and KeyFile configure client TLS from files
	// (--etcd-cafile, --etcd-certfile, --etcd-keyfile).
	CAFile, CertFile, KeyFile string
	// TLS is a ready client TLS configuration (the embedded etcd's); it wins over the files.
	TLS *tls.Config
	// Prefix is the key prefix under which the objects live; default "/minikit".
	Prefix string
	// CompactInterval is how often the history is compacted to the revision seen at the
	// previous tick; 0 means 5m (kube-apiserver's default), a negative value never.
	CompactInterval time.Duration
	Logger          *slog.Logger
}

// Tuning of the etcd backend.
const (
	// DefaultEtcdPrefix is where minikit keeps its keys in etcd.
	DefaultEtcdPrefix = "/minikit"
	// DefaultCompactInterval is kube-apiserver's --etcd-compaction-interval default.
	DefaultCompactInterval = 5 * time.Minute
	// etcdRequestTimeout bounds one request; a lost leader is re-elected well within it.
	etcdRequestTimeout = 15 * time.Second
	// maxConflictRetries bounds how often Update re-runs its function when another
	// server committed between its read and its commit.
	maxConflictRetries = 64
)

// Etcd is the etcd backend: several minikit servers may share one etcd.
//
// Every key is stored as Prefix+key (keys begin with "/"). Every committed Update also
// rewrites one sentinel key, Prefix+"#commit", and is guarded by a compare of the
// sentinel's mod revision against the one read at the start: two servers' updates can
// never both commit on the same snapshot, so read-modify-write functions (allocators)
// are exact across servers. Because every minikit commit bumps the sentinel, the
// revision a commit lands at is predictable (the snapshot's revision + 1) as long as
// minikit is the etcd's only writer: Tx.Rev() relies on that, so the etcd must be
// dedicated to one minikit cluster. OpenEtcd refuses an etcd holding foreign keys.
type Etcd struct {
	cli       *clientv3.Client
	endpoints []string
	prefix    string
	sentinel  string
	log       *slog.Logger

	// ctx ends at Close; watches and the compactor run under it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// mu serializes this server's updates, so that they conflict only with other
	// servers' updates; it guards the cached snapshot below.
	mu sync.Mutex
	// snapRev and snapSentinel are the revision and the sentinel's mod revision as of
	// this server's last commit (or conflict). They are only a guess for the next
	// update: the sentinel compare catches any other server's commit since.
	snapRev, snapSentinel int64
	known                 bool

	closeOnce sync.Once
	closed    chan struct{}
}

var _ Interface = (*Etcd)(nil)

// OpenEtcd connects to etcd, checks that it is dedicated to minikit (no key outside
// Prefix) and starts the compactor.
func OpenEtcd(ctx context.Context, cfg EtcdConfig) (*Etcd, error) {
	prefix := cfg.Prefix
	if prefix == "" {
		prefix = DefaultEtcdPrefix
	}
	if !strings.HasPrefix(prefix, "/") || strings.HasSuffix(prefix, "/") {
		return nil, fmt.Errorf("opening etcd store: prefix %q must begin and not end with \"/\"", prefix)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "store")
	cli, err := NewEtcdClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("opening etcd store: %w", err)
	}
	sctx, scancel := context.WithCancel(context.Background())
	e := &Etcd{
		cli: cli, endpoints: cfg.Endpoints, prefix: prefix, sentinel: prefix + "#commit", log: log,
		ctx: sctx, cancel: scancel, closed: make(chan struct{}),
	}
	if err := e.checkDedicated(ctx); err != nil {
		e.Close()
		return nil, err
	}
	interval := cfg.CompactInterval
	if interval == 0 {
		interval = DefaultCompactInterval
	}
	if interval > 0 {
		e.wg.Add(1)
		go e.compactLoop(interval)
	}
	return e, nil
}

// NewEtcdClient connects an etcd client as cfg says (endpoints and TLS only).
func NewEtcdClient(cfg EtcdConfig) (*clientv3.Client, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("no etcd endpoints (--etcd-endpoints)")
	}
	for _, ep := range cfg.Endpoints {
		if !strings.HasPrefix(ep, "https://") && !strings.HasPrefix(ep, "http://") {
			return nil, fmt.Errorf("etcd endpoint %q: want https://HOST:PORT or http://HOST:PORT", ep)
		}
	}
	tlsCfg := cfg.TLS
	if tlsCfg == nil && (cfg.CAFile != "" || cfg.CertFile != "" || cfg.KeyFile != "") {
		if (cfg.CertFile == "") != (cfg.KeyFile == "") {
			return nil, errors.New("--etcd-certfile and --etcd-keyfile go together")
		}
		info := transport.TLSInfo{CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, TrustedCAFile: cfg.CAFile}
		var err error
		if tlsCfg, err = info.ClientConfig(); err != nil {
			return nil, fmt.Errorf("etcd client TLS: %w", err)
		}
	}
	if tlsCfg == nil && strings.HasPrefix(cfg.Endpoints[0], "https://") {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12} // system roots, no client certificate
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            cfg.Endpoints,
		TLS:                  tlsCfg,
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		MaxCallSendMsgSize:   32 << 20,
		MaxCallRecvMsgSize:   1 << 30,
		Logger:               zap.NewNop(), // the store logs what matters itself
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client for %s: %w", strings.Join(cfg.Endpoints, ","), err)
	}
	return cli, nil
}

// checkDedicated fails if the etcd holds keys outside minikit's: another writer would
// make the revisions minikit predicts for its commits wrong.
func (e *Etcd) checkDedicated(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, etcdRequestTimeout)
	defer cancel()
	// Everything sorting before Prefix+"/" except the sentinel, and everything after
	// the range of Prefix+"/".
	before, err := e.cli.Get(ctx, "\x00", clientv3.WithRange(e.prefix+"/"), clientv3.WithKeysOnly(), clientv3.WithLimit(2))
	if err != nil {
		return e.wrap("connecting to etcd", err)
	}
	for _, kv := range before.Kvs {
		if string(kv.Key) != e.sentinel {
			return fmt.Errorf("opening etcd store at %s: key %q is outside prefix %q: the etcd must be dedicated to one minikit cluster", e.where(), kv.Key, e.prefix+"/")
		}
	}
	after, err := e.cli.Get(ctx, clientv3.GetPrefixRangeEnd(e.prefix+"/"), clientv3.WithFromKey(), clientv3.WithKeysOnly(), clientv3.WithLimit(1))
	if err != nil {
		return e.wrap("connecting to etcd", err)
	}
	if len(after.Kvs) > 0 {
		return fmt.Errorf("opening etcd store at %s: key %q is outside prefix %q: the etcd must be dedicated to one minikit cluster", e.where(), after.Kvs[0].Key, e.prefix+"/")
	}
	return nil
}

func (e *Etcd) where() string { return strings.Join(e.endpoints, ",") }

// wrap names the endpoints in an error and maps etcd's errors to the store's.
func (e *Etcd) wrap(doing string, err error) error {
	select {
	case <-e.closed:
		return ErrClosed
	default:
	}
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		return fmt.Errorf("%s at %s: %w", doing, e.where(), ErrExpired)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s at %s: no answer (is etcd running and reachable?): %w", doing, e.where(), err)
	}
	return fmt.Errorf("%s at %s: %w", doing, e.where(), err)
}

func (e *Etcd) checkKey(key string) error {
	if !strings.HasPrefix(key, "/") {
		return fmt.Errorf("store key %q must begin with \"/\"", key)
	}
	return nil
}

// rangeOf is the etcd key range of the store keys under prefix.
func (e *Etcd) rangeOf(prefix string) (key, end string) {
	key = e.prefix + prefix
	if prefix == "" {
		key = e.prefix + "/"
	}
	return key, clientv3.GetPrefixRangeEnd(key)
}

func (e *Etcd) requestCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(e.ctx, etcdRequestTimeout)
}

func (e *Etcd) toKV(kv *mvccpb.KeyValue) KV {
	return KV{Key: string(kv.Key[len(e.prefix):]), Value: kv.Value, CreateRev: kv.CreateRevision, ModRev: kv.ModRevision}
}

// Get implements Interface.
func (e *Etcd) Get(key string) (KV, error) {
	if err := e.checkKey(key); err != nil {
		return KV{}, err
	}
	ctx, cancel := e.requestCtx()
	defer cancel()
	resp, err := e.cli.Get(ctx, e.prefix+key)
	if err != nil {
		return KV{}, e.wrap(fmt.Sprintf("getting %s", key), err)
	}
	if len(resp.Kvs) == 0 {
		return KV{}, ErrNotFound
	}
	return e.toKV(resp.Kvs[0]), nil
}

// List implements Interface.
func (e *Etcd) List(prefix string) ([]KV, int64, error) {
	ctx, cancel := e.requestCtx()
	defer cancel()
	key, end := e.rangeOf(prefix)
	resp, err := e.cli.Get(ctx, key, clientv3.WithRange(end))
	if err != nil {
		return nil, 0, e.wrap(fmt.Sprintf("listing %s", prefix), err)
	}
	out := make([]KV, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if string(kv.Key) != e.sentinel {
			out = append(out, e.toKV(kv))
		}
	}
	return out, resp.Header.Revision, nil
}

// Rev implements Interface. It asks etcd (a linearizable read); if etcd does not answer
// it returns the last revision this server saw.
func (e *Etcd) Rev() int64 {
	ctx, cancel := e.requestCtx()
	defer cancel()
	resp, err := e.cli.Get(ctx, e.sentinel, clientv3.WithKeysOnly())
	if err != nil {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.snapRev
	}
	return resp.Header.Revision
}

// etcdTx reads at one snapshot revision and buffers its writes; Update commits them
// as one etcd transaction.
type etcdTx struct {
	e      *Etcd
	ctx    context.Context
	snap   int64 // the revision reads see
	writes map[string]*pending
	order  []string // keys in first-write order
	failed error
}

type pending struct {
	value     []byte
	deleted   bool
	existed   bool  // present at the snapshot
	createRev int64 // at the snapshot, if existed
}

func (t *etcdTx) Rev() int64 { return t.snap + 1 }

// read gets key at the snapshot; a failure fails the whole Update.
func (t *etcdTx) read(key string) (KV, bool) {
	resp, err := t.e.cli.Get(t.ctx, t.e.prefix+key, clientv3.WithRev(t.snap))
	if err != nil {
		if t.failed == nil {
			t.failed = err
		}
		return KV{}, false
	}
	if len(resp.Kvs) == 0 {
		return KV{}, false
	}
	return t.e.toKV(resp.Kvs[0]), true
}

func (t *etcdTx) Get(key string) (KV, bool) {
	if p, ok := t.writes[key]; ok {
		if p.deleted {
			return KV{}, false
		}
		return t.pendingKV(key, p), true
	}
	return t.read(key)
}

func (t *etcdTx) pendingKV(key string, p *pending) KV {
	create := t.Rev()
	if p.existed {
		create = p.createRev
	}
	return KV{Key: key, Value: p.value, CreateRev: create, ModRev: t.Rev()}
}

func (t *etcdTx) List(prefix string) []KV {
	key, end := t.e.rangeOf(prefix)
	resp, err := t.e.cli.Get(t.ctx, key, clientv3.WithRange(end), clientv3.WithRev(t.snap))
	if err != nil {
		if t.failed == nil {
			t.failed = err
		}
		return nil
	}
	out := make([]KV, 0, len(resp.Kvs))
	seen := map[string]bool{}
	for _, kv := range resp.Kvs {
		if string(kv.Key) == t.e.sentinel {
			continue
		}
		k := t.e.toKV(kv)
		if p, ok := t.writes[k.Key]; ok {
			seen[k.Key] = true
			if p.deleted {
				continue
			}
			k = t.pendingKV(k.Key, p)
		}
		out = append(out, k)
	}
	added := false
	for k, p := range t.writes {
		if !seen[k] && !p.deleted && strings.HasPrefix(k, prefix) {
			out = append(out, t.pendingKV(k, p))
			added = true
		}
	}
	if added {
		sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	}
	return out
}

// state returns the pending entry for key, reading the snapshot the first time.
func (t *etcdTx) state(key string) *pending {
	if p, ok := t.writes[key]; ok {
		return p
	}
	kv, ok := t.read(key)
	p := &pending{deleted: !ok, existed: ok, createRev: kv.CreateRev, value: kv.Value}
	t.writes[key] = p
	t.order = append(t.order, key)
	return p
}

func (t *etcdTx) Create(key string, value []byte) error {
	if err := t.e.checkKey(key); err != nil {
		return err
	}
	p := t.state(key)
	if t.failed != nil {
		return t.failed
	}
	if !p.deleted {
		return ErrExists
	}
	p.value, p.deleted = bytes.Clone(value), false
	return nil
}

func (t *etcdTx) Put(key string, value []byte) error {
	if err := t.e.checkKey(key); err != nil {
		return err
	}
	p := t.state(key)
	if t.failed != nil {
		return t.failed
	}
	p.value, p.deleted = bytes.Clone(value), false
	return nil
}

func (t *etcdTx) Delete(key string) error {
	if err := t.e.checkKey(key); err != nil {
		return err
	}
	p := t.state(key)
	if t.failed != nil {
		return t.failed
	}
	if p.deleted {
		return ErrNotFound
	}
	p.deleted, p.value = true, nil
	return nil
}

// ops is the transaction's net effect, one operation per key (etcd refuses a key twice
// in one transaction); a key created and deleted again is no operation at all.
func (t *etcdTx) ops() []clientv3.Op {
	var ops []clientv3.Op
	for _, k := range t.order {
		p := t.writes[k]
		switch {
		case p.deleted && p.existed:
			ops = append(ops, clientv3.OpDelete(t.e.prefix+k))
		case !p.deleted:
			ops = append(ops, clientv3.OpPut(t.e.prefix+k, string(p.value)))
		}
	}
	return ops
}

// Update implements Interface. fn runs against a snapshot and its writes are committed
// as one etcd transaction guarded by the sentinel's mod revision; if another server
// committed in between, fn runs again on a fresh snapshot. So fn may run more than
// once and must have no effect outside tx.
func (e *Etcd) Update(fn func(tx Tx) error) (int64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	select {
	case <-e.closed:
		return 0, ErrClosed
	default:
	}
	for attempt := 0; attempt <= maxConflictRetries; attempt++ {
		if !e.known {
			if err := e.refreshSnapshot(); err != nil {
				return 0, err
			}
		}
		ctx, cancel := e.requestCtx()
		t := &etcdTx{e: e, ctx: ctx, snap: e.snapRev, writes: map[string]*pending{}}
		err := fn(t)
		if t.failed != nil {
			cancel()
			if errors.Is(t.failed, rpctypes.ErrCompacted) {
				// The cached snapshot is older than the history: another server wrote
				// and compacted since. Read afresh.
				e.known = false
				continue
			}
			return 0, e.wrap("reading in store transaction", t.failed)
		}
		if err != nil {
			cancel()
			return 0, err
		}
		ops := t.ops()
		if len(ops) == 0 {
			cancel()
			return e.snapRev, nil
		}
		ops = append(ops, clientv3.OpPut(e.sentinel, ""))
		resp, err := e.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(e.sentinel), "=", e.snapSentinel)).
			Then(ops...).
			Else(clientv3.OpGet(e.sentinel, clientv3.WithKeysOnly())).
			Commit()
		cancel()
		if err != nil {
			// The outcome is unknown (a timeout may have committed): read afresh.
			e.known = false
			return 0, e.wrap("committing store transaction", err)
		}
		if !resp.Succeeded {
			e.snapRev = resp.Header.Revision
			e.snapSentinel = 0
			if r := resp.Responses[0].GetResponseRange(); r != nil && len(r.Kvs) > 0 {
				e.snapSentinel = r.Kvs[0].ModRevision
			}
			continue
		}
		rev := resp.Header.Revision
		if rev != t.Rev() {
			e.log.Error("etcd commit landed at an unexpected revision: something besides minikit writes to this etcd, and the resourceVersions of this commit's objects are wrong",
				"predicted", t.Rev(), "committed", rev, "endpoints", e.where())
		}
		e.snapRev, e.snapSentinel = rev, rev
		return rev, nil
	}
	e.known = false
	return 0, fmt.Errorf("committing store transaction at %s: %d conflicts in a row with other servers' commits, giving up", e.where(), maxConflictRetries+1)
}

// refreshSnapshot reads the current revision and the sentinel's mod revision.
func (e *Etcd) refreshSnapshot() error {
	ctx, cancel := e.requestCtx()
	defer cancel()
	resp, err := e.cli.Get(ctx, e.sentinel, clientv3.WithKeysOnly())
	if err != nil {
		return e.wrap("reading store revision", err)
	}
	e.snapRev, e.snapSentinel, e.known = resp.Header.Revision, 0, true
	if len(resp.Kvs) > 0 {
		e.snapSentinel = resp.Kvs[0].ModRevision
	}
	return nil
}

// Watch implements Interface. A fromRev older than the compacted history gives
// ErrExpired at once; a compaction noticed later (the watch reconnected after falling
// far behind) closes the channel, as does losing the etcd leader.
func (e *Etcd) Watch(ctx context.Context, prefix string, fromRev int64) (<-chan Event, error) {
	select {
	case <-e.closed:
		return nil, ErrClosed
	default:
	}
	key, end := e.rangeOf(prefix)
	rctx, rcancel := e.requestCtx()
	// One read gives the current revision (where "from now" starts: watching from an
	// explicit revision loses nothing committed between this call and the watch being
	// registered) and, read at fromRev+1, whether the history still holds fromRev.
	cur, err := e.cli.Get(rctx, e.sentinel, clientv3.WithKeysOnly())
	if err == nil && fromRev != 0 && fromRev < cur.Header.Revision {
		_, err = e.cli.Get(rctx, key, clientv3.WithRange(end), clientv3.WithRev(fromRev+1), clientv3.WithCountOnly())
	}
	rcancel()
	if err != nil {
		return nil, e.wrap(fmt.Sprintf("watching %s from revision %d", prefix, fromRev), err)
	}
	start := fromRev + 1
	if fromRev == 0 {
		start = cur.Header.Revision + 1
	}
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(e.ctx))
	wch := e.cli.Watch(wctx, key, clientv3.WithRange(end), clientv3.WithRev(start), clientv3.WithPrevKV())
	out := make(chan Event, watcherBuffer)
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer close(out)
		defer wcancel()
		for {
			var resp clientv3.WatchResponse
			var ok bool
			select {
			case <-ctx.Done():
				return
			case resp, ok = <-wch:
			}
			if !ok {
				return
			}
			if resp.CompactRevision != 0 || resp.Canceled || resp.Err() != nil {
				if err := resp.Err(); err != nil && !errors.Is(err, context.Canceled) {
					e.log.Debug("etcd watch ended", "prefix", prefix, "err", err)
				}
				return
			}
			for _, ev := range resp.Events {
				if string(ev.Kv.Key) == e.sentinel {
					continue
				}
				se := Event{Key: string(ev.Kv.Key[len(e.prefix):]), Rev: ev.Kv.ModRevision}
				switch {
				case ev.Type == mvccpb.DELETE:
					se.Type, se.Rev = Deleted, ev.Kv.ModRevision
					if ev.PrevKv != nil {
						se.Value = ev.PrevKv.Value
					}
				case ev.IsCreate():
					se.Type, se.Value = Added, ev.Kv.Value
				default:
					se.Type, se.Value = Modified, ev.Kv.Value
					if ev.PrevKv != nil {
						se.Prev = ev.PrevKv.Value
					}
				}
				select {
				case out <- se:
				default:
					return // fallen behind: the caller re-watches from its last revision
				}
			}
		}
	}()
	return out, nil
}

// compactLoop compacts, at every tick, to the revision seen at the previous tick
// (kube-apiserver's scheme): watches can resume from anything at most one interval
// old. Several servers doing it is harmless: compacting to an already compacted
// revision is refused and ignored.
func (e *Etcd) compactLoop(interval time.Duration) {
	defer e.wg.Done()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var last int64
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-tick.C:
		}
		ctx, cancel := e.requestCtx()
		resp, err := e.cli.Get(ctx, e.sentinel, clientv3.WithKeysOnly())
		if err != nil {
			cancel()
			e.log.Warn("reading etcd revision for compaction", "endpoints", e.where(), "err", err)
			continue
		}
		if last > 0 {
			if _, err := e.cli.Compact(ctx, last); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
				e.log.Warn("compacting etcd", "revision", last, "endpoints", e.where(), "err", err)
			} else if err == nil {
				e.log.Debug("compacted etcd", "revision", last)
			}
		}
		cancel()
		last = resp.Header.Revision
	}
}

// Compact discards the history before rev now (watches from before it get ErrExpired).
func (e *Etcd) Compact(rev int64) error {
	ctx, cancel := e.requestCtx()
	defer cancel()
	if _, err := e.cli.Compact(ctx, rev); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		return e.wrap(fmt.Sprintf("compacting to revision %d", rev), err)
	}
	return nil
}

// Close stops the watches and the compactor and closes the client. It does not touch
// the etcd itself.
func (e *Etcd) Close() error {
	var err error
	e.closeOnce.Do(func() {
		e.mu.Lock() // let a running update finish
		close(e.closed)
		e.mu.Unlock()
		e.cancel()
		e.wg.Wait()
		err = e.cli.Close()
	})
	return err
}
