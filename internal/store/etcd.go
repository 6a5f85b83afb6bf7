package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
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
	// MaxTxnOps and MaxRequestBytes are the etcd's --max-txn-ops and
	// --max-request-bytes; 0 means etcd's defaults, 128 and 1.5 MiB. Concurrent
	// updates are committed together in one etcd transaction that stays within both.
	MaxTxnOps       int
	MaxRequestBytes int
	Logger          *slog.Logger
}

// Tuning of the etcd backend.
const (
	// DefaultEtcdPrefix is where minikit keeps its keys in etcd.
	DefaultEtcdPrefix = "/minikit"
	// DefaultCompactInterval is kube-apiserver's --etcd-compaction-interval default.
	DefaultCompactInterval = 5 * time.Minute
	// DefaultMaxTxnOps and DefaultMaxRequestBytes are etcd's defaults.
	DefaultMaxTxnOps       = 128
	DefaultMaxRequestBytes = 3 << 19
	// maxBatch bounds the updates committed together in one transaction.
	maxBatch = 1024
	// opOverhead is a generous estimate of what one operation adds to a
	// transaction's request besides its key and value.
	opOverhead = 32
	// etcdRequestTimeout bounds one request; a lost leader is re-elected well within it.
	etcdRequestTimeout = 15 * time.Second
	// maxConflictRetries bounds how often Update re-runs its function when another
	// server committed between its read and its commit.
	maxConflictRetries = 64
	// maxInFlight bounds the commits sent and not yet answered. etcd handles each
	// request in its own goroutine, so two sent microseconds apart are applied in
	// either order; a swap costs the later one a second send. Measured with 16
	// writers on one member: two in flight swap one commit in eight; four swap
	// nearly every one (each resend then races the next new commit).
	maxInFlight = 2
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

	// mirror is the update functions' view of the store.
	mirror *mirror
	// reqs feeds the committer, the one goroutine that runs update functions.
	reqs chan *etcdReq
	// id makes this store's commit tokens unique among servers.
	id string
	// lastRev is the newest revision this store saw, for Rev when etcd is away.
	lastRev atomic.Int64
	// maxOps and maxBytes bound one commit's transaction (operations, and the
	// estimated bytes of its keys and values).
	maxOps, maxBytes int

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
		reqs: make(chan *etcdReq), id: rand.Text()[:12],
		maxOps: cfg.MaxTxnOps, maxBytes: cfg.MaxRequestBytes,
	}
	if e.maxOps <= 0 {
		e.maxOps = DefaultMaxTxnOps
	}
	if e.maxBytes <= 0 {
		e.maxBytes = DefaultMaxRequestBytes
	}
	e.maxBytes -= e.maxBytes / 8 // room for what the estimate leaves out
	if err := e.checkDedicated(ctx); err != nil {
		e.Close()
		return nil, err
	}
	e.mirror = newMirror(e)
	e.wg.Add(2)
	go e.mirror.run()
	go e.committer()
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
		// One member at a time, the first that answers (etcd's default spreads calls
		// over the members): the committer's pipelined transactions then reach the
		// leader in the order they were sent. The client moves on to the next
		// endpoint when that member goes away.
		DialOptions: []grpc.DialOption{
			grpc.WithDisableServiceConfig(),
			grpc.WithDefaultServiceConfig(`{"loadBalancingPolicy":"pick_first"}`),
		},
		Logger: zap.NewNop(), // the store logs what matters itself
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
		return e.lastRev.Load()
	}
	e.lastRev.Store(resp.Header.Revision)
	return resp.Header.Revision
}

// etcdTx reads this server's mirror of the store (at or after the newest commit the
// committer knows of), seen through the writes of this server's commits still in
// flight, and buffers its own writes; the committer sends them as one etcd
// transaction.
type etcdTx struct {
	e      *Etcd
	flying []*flight // commits in flight, oldest first: reads see their writes over the mirror's
	rev    int64     // the revision this transaction commits at
	writes map[string]*pending
	order  []string // keys in first-write order
	failed error
}

type pending struct {
	value     []byte
	deleted   bool
	existed   bool  // present before this transaction
	createRev int64 // before this transaction, if existed
}

func (t *etcdTx) Rev() int64 { return t.rev }

func (t *etcdTx) fail(err error) {
	if t.failed == nil {
		t.failed = err
	}
}

// read gets key as of the mirror plus the writes in flight.
func (t *etcdTx) read(key string) (KV, bool) {
	for i := len(t.flying) - 1; i >= 0; i-- {
		f := t.flying[i]
		if f.barrier {
			continue
		}
		if p, ok := f.tx.writes[key]; ok {
			if p.deleted {
				return KV{}, false
			}
			return pendingKV(key, p, f.tx.rev), true
		}
	}
	return t.e.mirror.get(key)
}

func (t *etcdTx) Get(key string) (KV, bool) {
	if p, ok := t.writes[key]; ok {
		if p.deleted {
			return KV{}, false
		}
		return pendingKV(key, p, t.rev), true
	}
	return t.read(key)
}

func pendingKV(key string, p *pending, rev int64) KV {
	create := rev
	if p.existed {
		create = p.createRev
	}
	return KV{Key: key, Value: p.value, CreateRev: create, ModRev: rev}
}

func (t *etcdTx) List(prefix string) []KV {
	out := t.e.mirror.list(prefix)
	layers := make([]*etcdTx, 0, len(t.flying)+1)
	for _, f := range t.flying {
		if !f.barrier {
			layers = append(layers, f.tx)
		}
	}
	for _, l := range append(layers, t) {
		out = overlay(out, prefix, l)
	}
	return out
}

// overlay applies l's writes under prefix to the sorted list kvs.
func overlay(kvs []KV, prefix string, l *etcdTx) []KV {
	touched := false
	for k := range l.writes {
		if strings.HasPrefix(k, prefix) {
			touched = true
			break
		}
	}
	if !touched {
		return kvs
	}
	out := kvs[:0:0]
	for _, kv := range kvs {
		if _, ok := l.writes[kv.Key]; !ok {
			out = append(out, kv)
		}
	}
	for k, p := range l.writes {
		if strings.HasPrefix(k, prefix) && !p.deleted {
			out = append(out, pendingKV(k, p, l.rev))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// state returns the pending entry for key, reading it the first time.
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

// writable is key's pending write, once the key is valid and the
// transaction's reads have not failed.
func (t *etcdTx) writable(key string) (*pending, error) {
	if err := t.e.checkKey(key); err != nil {
		return nil, err
	}
	p := t.state(key)
	if t.failed != nil {
		return nil, t.failed
	}
	return p, nil
}

func (t *etcdTx) Create(key string, value []byte) error {
	p, err := t.writable(key)
	if err != nil {
		return err
	}
	if !p.deleted {
		return ErrExists
	}
	p.value, p.deleted = bytes.Clone(value), false
	return nil
}

func (t *etcdTx) Put(key string, value []byte) error {
	p, err := t.writable(key)
	if err != nil {
		return err
	}
	p.value, p.deleted = bytes.Clone(value), false
	return nil
}

func (t *etcdTx) Delete(key string) error {
	p, err := t.writable(key)
	if err != nil {
		return err
	}
	if p.deleted {
		return ErrNotFound
	}
	p.deleted, p.value = true, nil
	return nil
}

// ops is the transaction's net effect, one operation per key (etcd refuses a key twice
// in one transaction); a key created and deleted again is no operation at all. It
// drops such keys from writes, so that later transactions reading through this one
// see what etcd will hold.
func (t *etcdTx) ops() []clientv3.Op {
	var ops []clientv3.Op
	for _, k := range t.order {
		p := t.writes[k]
		switch {
		case p.deleted && p.existed:
			ops = append(ops, clientv3.OpDelete(t.e.prefix+k))
		case !p.deleted:
			ops = append(ops, clientv3.OpPut(t.e.prefix+k, string(p.value)))
		default:
			delete(t.writes, k)
		}
	}
	return ops
}

// etcdReq is one Update waiting for the committer.
type etcdReq struct {
	fn       func(tx Tx) error
	done     chan struct{}
	rev      int64
	err      error
	attempts int
	// judged: fn's last outcome that wrote nothing (an error, or nothing to
	// change) was reached on a state read from etcd just before it ran.
	judged bool
}

// flight is a commit sent to etcd whose answer has not been handled yet: the updates
// of one batch (group commit), or a barrier.
type flight struct {
	members []member // in the order they were taken
	tx      *etcdTx  // the batch's writes (members' writes, at most one per key) at its revision
	token   string   // the sentinel's value once it commits
	res     chan txnResult
	// A barrier is one function that wrote nothing, waiting for the commits before
	// it to land before it answers rev and members[0].err.
	barrier bool
	rev     int64
	// What is sent, kept to send again.
	seq   uint64
	guard []clientv3.Cmp
	ops   []clientv3.Op
}

// member is one update in a flight. A passenger wrote nothing (its function failed
// or only read) after other members' writes it may have read: it answers err (or
// nothing) at the batch's revision once the batch commits, and runs again if the
// batch does not.
type member struct {
	req       *etcdReq
	passenger bool
	err       error
}

// send sends the flight's transaction; its answer arrives on f.res.
func (e *Etcd) send(f *flight) {
	f.res = make(chan txnResult, 1)
	ctx, cancel := e.requestCtx()
	go func() {
		defer cancel()
		resp, err := e.cli.Txn(ctx).If(f.guard...).Then(f.ops...).Else(clientv3.OpGet(e.sentinel)).Commit()
		f.res <- txnResult{resp, err}
	}()
}

// ourEarlier says whether token is one of this store's commits before seq.
func (e *Etcd) ourEarlier(token string, seq uint64) bool {
	id, n, ok := strings.Cut(token, "-")
	if !ok || id != e.id {
		return false
	}
	v, err := strconv.ParseUint(n, 10, 64)
	return err == nil && v < seq
}

type txnResult struct {
	resp *clientv3.TxnResponse
	err  error
}

// sentinelState is what the sentinel held at a revision: the next commit is guarded
// by it.
type sentinelState struct {
	rev   int64  // the store revision this was read at (or committed)
	mod   int64  // the sentinel's mod revision; 0: absent
	value string // the sentinel's value (a commit token)
}

// Update implements Interface. fn runs against a snapshot and its writes are committed
// as one etcd transaction guarded by the sentinel: if another server committed in
// between, fn runs again on a fresh snapshot. So fn may run more than once and must
// have no effect outside tx.
//
// One committer goroutine runs the functions in turn against the mirror (etcd_mirror.go)
// and pipelines their commits (maxInFlight): the next function runs on the state the
// commits in flight will leave (their writes overlay the mirror) and is sent guarded
// by the previous one's commit token without waiting for its answer. If etcd applied
// it before its predecessor, it is sent again as it is once the predecessor landed.
// If a commit fails for another reason (another server committed), every later one in
// flight fails with it (its guard names a token that never committed); once they are
// all answered, their functions run again, in order, on a fresh state.
//
// Group commit: each commit carries every update queued when it was built (a batch),
// their functions run in turn on the writes of the earlier ones, all at one revision,
// in one transaction. A function writing a key an earlier one of the batch wrote, or
// not fitting within MaxTxnOps and MaxRequestBytes, waits for the next batch, so a key
// is written at most once per revision (docs/datastore.md).
func (e *Etcd) Update(fn func(tx Tx) error) (int64, error) {
	req := &etcdReq{fn: fn, done: make(chan struct{})}
	select {
	case <-e.closed:
		return 0, ErrClosed
	case e.reqs <- req:
	}
	<-req.done
	return req.rev, req.err
}

// committer owns the sentinel state and the commits in flight (see Update).
func (e *Etcd) committer() {
	defer e.wg.Done()
	var (
		base    sentinelState // newest state known committed
		known   bool          // base is worth guarding on
		retry   []*etcdReq    // to run again, in order, before new requests
		flying  []*flight
		broken  bool // a commit failed: send nothing until the flights are answered
		refresh bool // an answer was lost: read the sentinel before going on
	)
	finish := func(r *etcdReq, rev int64, err error) {
		r.rev, r.err = rev, err
		close(r.done)
	}
	learn := func(s sentinelState) {
		if s.rev > base.rev || !known {
			base, known = s, true
			e.lastRev.Store(s.rev)
		}
	}
	// land handles the answer of the oldest flight.
	land := func(res txnResult) {
		f := flying[0]
		flying = flying[1:]
		switch {
		case f.barrier:
			// What the function saw holds only if every commit before it landed.
			if broken {
				retry = append(retry, f.members[0].req)
			} else {
				finish(f.members[0].req, f.rev, f.members[0].err)
			}
		case res.err != nil:
			// The outcome is unknown (a timeout may have committed): read afresh.
			broken, refresh = true, true
			err := e.wrap("committing store transaction", res.err)
			for _, m := range f.members {
				finish(m.req, 0, err)
			}
		case res.resp.Succeeded:
			rev := res.resp.Header.Revision
			if rev != f.tx.rev {
				e.log.Error("etcd commit landed at an unexpected revision: something besides minikit writes to this etcd, and the resourceVersions of this commit's objects are wrong",
					"predicted", f.tx.rev, "committed", rev, "endpoints", e.where())
			}
			learn(sentinelState{rev: rev, mod: rev, value: f.token})
			for _, m := range f.members {
				finish(m.req, rev, m.err)
			}
		default:
			s := sentinelState{rev: res.resp.Header.Revision}
			if r := res.resp.Responses[0].GetResponseRange(); r != nil && len(r.Kvs) > 0 {
				s.mod, s.value = r.Kvs[0].ModRevision, string(r.Kvs[0].Value)
			}
			if !broken && e.ourEarlier(s.value, f.seq-1) {
				// etcd applied this one before the commit it follows, which has
				// landed since: what fn saw still holds, so send it again as it is.
				e.send(f)
				flying = append([]*flight{f}, flying...)
				return
			}
			broken = true
			learn(s)
			for _, m := range f.members {
				m.req.attempts++
				if m.req.attempts > maxConflictRetries {
					finish(m.req, 0, fmt.Errorf("committing store transaction at %s: %d conflicts in a row with other servers' commits, giving up", e.where(), m.req.attempts))
				} else {
					retry = append(retry, m.req)
				}
			}
		}
	}
	var seq uint64
	for {
		// Answers first, in the order the commits were sent.
		for len(flying) > 0 {
			select {
			case res := <-flying[0].res:
				land(res)
				continue
			default:
			}
			break
		}
		if broken && len(flying) == 0 {
			broken = false
		}
		var req *etcdReq
		if !broken && len(flying) < maxInFlight {
			if len(retry) > 0 {
				req, retry = retry[0], retry[1:]
			} else {
				select {
				case req = <-e.reqs:
				default:
				}
			}
		}
		if req == nil {
			// Nothing to start now: wait for an answer or a request.
			var reqs chan *etcdReq
			if !broken && len(flying) < maxInFlight {
				reqs = e.reqs
			}
			var answer chan txnResult
			if len(flying) > 0 {
				answer = flying[0].res
			}
			select {
			case res := <-answer:
				land(res)
			case req = <-reqs:
			case <-e.ctx.Done():
				if len(flying) == 0 {
					e.drain(retry)
					return
				}
				land(<-flying[0].res)
			}
			if req == nil {
				continue
			}
		}
		fresh := false
		if refresh || !known {
			s, err := e.readSentinel()
			if err != nil {
				finish(req, 0, err)
				continue
			}
			refresh, fresh = false, true
			base, known = s, true
		}
		// The state this function sees: base, then the writes in flight.
		prev := base
		for i := len(flying) - 1; i >= 0; i-- {
			if last := flying[i]; !last.barrier {
				prev = sentinelState{rev: last.tx.rev, mod: last.tx.rev, value: last.token}
				break
			}
		}
		ctx, cancel := e.requestCtx()
		seen, err := e.mirror.readLocked(ctx, base.rev)
		cancel()
		if err != nil {
			finish(req, 0, e.wrap("reading in store transaction", err))
			continue
		}
		// Commits the mirror already holds are not laid over it again: a later
		// commit there (another server's) may have changed the same keys.
		var over []*flight
		for _, f := range flying {
			if !f.barrier && f.tx.rev > seen {
				over = append(over, f)
			}
		}
		// Group commit: this request and those queued behind it run in turn, each on
		// the writes of the ones before it (the batch is the last layer), and commit
		// as one transaction at one revision.
		f := &flight{tx: &etcdTx{e: e, rev: prev.rev + 1, writes: map[string]*pending{}}}
		layers := append(over, f)
		var size int
		for req != nil {
			t := &etcdTx{e: e, flying: layers, rev: f.tx.rev, writes: map[string]*pending{}}
			err := req.fn(t)
			t.flying = nil
			if t.failed != nil {
				err = e.wrap("reading in store transaction", t.failed)
			}
			var ops []clientv3.Op
			if err == nil {
				ops = t.ops()
			}
			if len(ops) == 0 && len(f.members) > 0 {
				// It may have read the batch's writes: it answers with the batch.
				f.members = append(f.members, member{req: req, passenger: true, err: err})
			} else if len(ops) == 0 {
				// Nothing to commit: fn failed or only read. If it read writes still
				// in flight, its answer waits for them to land (and it runs again
				// if one does not).
				rev := max(prev.rev, seen)
				switch {
				case t.failed != nil:
					finish(req, 0, err)
				case len(flying) == 0:
					// Nothing in flight means no commit's guard will check the
					// state fn judged, and the mirror may not have caught up with
					// another server's commit yet (a resourceVersion conflict, a
					// NotFound, "nothing to change" judged on an old object):
					// unless the state was just read, judge again on the current
					// one.
					if !fresh && !req.judged {
						if s, rerr := e.readSentinel(); rerr == nil && (s.mod != base.mod || s.value != base.value) {
							req.judged = true
							learn(s)
							base = s
							retry = append([]*etcdReq{req}, retry...)
							break
						}
					}
					finish(req, rev, err)
				default:
					b := &flight{members: []member{{req: req, err: err}}, barrier: true, rev: rev, res: make(chan txnResult, 1)}
					b.res <- txnResult{}
					flying = append(flying, b)
				}
				break // the next request starts a batch of its own
			} else {
				n := 0
				conflict := false
				for k, p := range t.writes {
					n += len(e.prefix) + len(k) + len(p.value) + opOverhead
					if _, ok := f.tx.writes[k]; ok {
						conflict = true
					}
				}
				// At most one write per key per revision: a later function of the
				// batch replacing an earlier one's write at the same revision would
				// hand the earlier client an object that never was current. Such a
				// function, or one that does not fit, goes first into the next batch.
				if len(f.members) > 0 && (conflict || len(f.ops)+len(ops)+1 > e.maxOps || size+n > e.maxBytes) {
					retry = append([]*etcdReq{req}, retry...)
					break
				}
				for k, p := range t.writes {
					f.tx.writes[k] = p
				}
				f.members = append(f.members, member{req: req})
				f.ops = append(f.ops, ops...)
				size += n
			}
			req = nil
			if len(f.members) >= maxBatch {
				break
			}
			if len(retry) > 0 {
				req, retry = retry[0], retry[1:]
			} else {
				select {
				case req = <-e.reqs:
				default:
				}
			}
		}
		e.mirror.mu.RUnlock()
		if len(f.ops) == 0 {
			continue
		}
		seq++
		f.seq, f.token = seq, fmt.Sprintf("%s-%d", e.id, seq)
		f.guard = []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(e.sentinel), "=", prev.mod)}
		if prev.mod != 0 {
			f.guard = append(f.guard, clientv3.Compare(clientv3.Value(e.sentinel), "=", prev.value))
		}
		f.ops = append(f.ops, clientv3.OpPut(e.sentinel, f.token))
		flying = append(flying, f)
		e.send(f)
	}
}

// drain fails the updates that will not run because the store closed.
func (e *Etcd) drain(retry []*etcdReq) {
	for _, r := range retry {
		r.err = ErrClosed
		close(r.done)
	}
	for {
		select {
		case r := <-e.reqs:
			r.err = ErrClosed
			close(r.done)
		default:
			return
		}
	}
}

// readSentinel reads the current revision and the sentinel.
func (e *Etcd) readSentinel() (sentinelState, error) {
	ctx, cancel := e.requestCtx()
	defer cancel()
	resp, err := e.cli.Get(ctx, e.sentinel)
	if err != nil {
		return sentinelState{}, e.wrap("reading store revision", err)
	}
	s := sentinelState{rev: resp.Header.Revision}
	if len(resp.Kvs) > 0 {
		s.mod, s.value = resp.Kvs[0].ModRevision, string(resp.Kvs[0].Value)
	}
	return s, nil
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
			// One revision's events (a transaction, or a batch of updates) are
			// delivered whole or not at all: the caller resumes from the last
			// revision it saw, so stopping within a revision would lose the rest.
			evs := resp.Events
			for len(evs) > 0 {
				n := 1
				for n < len(evs) && evs[n].Kv.ModRevision == evs[0].Kv.ModRevision {
					n++
				}
				group := make([]Event, 0, n)
				for _, ev := range evs[:n] {
					if string(ev.Kv.Key) != e.sentinel {
						group = append(group, e.toEvent(ev))
					}
				}
				evs = evs[n:]
				if len(group) > cap(out)-len(out) && len(group) <= cap(out) {
					return // fallen behind: the caller re-watches from its last revision
				}
				for _, se := range group {
					// A revision larger than the buffer waits for room.
					select {
					case out <- se:
					case <-ctx.Done():
						return
					}
				}
			}
		}
	}()
	return out, nil
}

// toEvent turns an etcd event into the store's.
func (e *Etcd) toEvent(ev *clientv3.Event) Event {
	se := Event{Key: string(ev.Kv.Key[len(e.prefix):]), Rev: ev.Kv.ModRevision}
	switch {
	case ev.Type == mvccpb.DELETE:
		se.Type = Deleted
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
	return se
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
		close(e.closed) // no new updates
		e.cancel()      // the committer lands what is in flight and stops
		e.wg.Wait()
		err = e.cli.Close()
	})
	return err
}
