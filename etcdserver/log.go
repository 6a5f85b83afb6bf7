package etcdserver

import (
	"context"
	"log/slog"
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newZap builds etcd's logger: everything from info up goes to path (etcd's own log,
// for post-mortems), and warnings and errors also go to log, minikit's logger.
func newZap(path string, log *slog.Logger) (*zap.Logger, func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, err
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	file := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(f), zapcore.InfoLevel)
	core := zapcore.NewTee(file, &slogCore{log: log})
	return zap.New(core), func() { f.Close() }, nil
}

// slogCore forwards zap entries at warn and above to a slog.Logger.
type slogCore struct {
	log   *slog.Logger
	attrs []any
}

func (c *slogCore) Enabled(l zapcore.Level) bool { return l >= zapcore.WarnLevel }

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{log: c.log, attrs: append(append([]any(nil), c.attrs...), fieldAttrs(fields)...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
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
