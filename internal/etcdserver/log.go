package etcdserver

import (
	"context"
	"log/slog"
	"os"
	"sync/atomic"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newZap builds etcd's logger: everything from info up goes to path (etcd's own log,
// for post-mortems), and warnings and errors also go to log, minikit's logger.
// Once closing is set (the member is stopping) nothing more goes to log: the
// listeners' errors are expected then.
func newZap(path string, log *slog.Logger, closing *atomic.Bool) (*zap.Logger, func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, err
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	file := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(f), zapcore.InfoLevel)
	core := zapcore.NewTee(file, &slogCore{log: log, closing: closing})
	return zap.New(core), func() { f.Close() }, nil
}

// slogCore forwards zap entries at warn and above to a slog.Logger.
type slogCore struct {
	log     *slog.Logger
	closing *atomic.Bool
	attrs   []any
}

func (c *slogCore) Enabled(l zapcore.Level) bool { return l >= zapcore.WarnLevel }

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{log: c.log, closing: c.closing, attrs: append(append([]any(nil), c.attrs...), fieldAttrs(fields)...)}
}

// quiet are warnings etcd gives about choices minikit made on purpose; they stay in
// etcd.log only.
var quiet = map[string]bool{
	// Clients reach gRPC and HTTP on one port; minikit's store speaks only gRPC.
	"Running http and grpc server on single port. This is not recommended for production.": true,
	// The auth tokens are not used: clients authenticate with certificates.
	"simple token is not cryptographically signed": true,
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) && !quiet[e.Message] && !c.closing.Load() {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	level := slog.LevelWarn
	if e.Level >= zapcore.ErrorLevel {
		level = slog.LevelError
	}
	c.log.Log(context.Background(), level, "etcd: "+e.Message, append(append([]any(nil), c.attrs...), fieldAttrs(fields)...)...)
	return nil
}

func (c *slogCore) Sync() error { return nil }

func fieldAttrs(fields []zapcore.Field) []any {
	m := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(m)
	}
	out := make([]any, 0, 2*len(m.Fields))
	for k, v := range m.Fields {
		out = append(out, k, v)
	}
	return out
}
