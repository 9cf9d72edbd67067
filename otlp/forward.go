package otlp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploggrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	otellog "go.opentelemetry.io/otel/log"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/gprobes/gprobes/daemon"
	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
)

// The forwarder: the process that turns the ring's records into
// OpenTelemetry log records and sends them, with the SDK's BatchProcessor
// and OTLP exporters. It runs SCHED_IDLE (nice forwarderNice where that
// is refused), on one CPU at most: on a busy CPU it yields at once to the
// probed programs and to the daemon, so that what it costs (15-20 us of
// CPU a record here: the SDK's records, protobuf, the connection) does not
// lengthen a probe hit; when it falls behind, the ring fills and the
// daemon counts what it drops.

const (
	forwarderNice = 19
	// sdkQueue is the most records in the SDK at once (its queue, a
	// request): the forwarder takes no more from the ring, so the SDK
	// never drops any.
	sdkQueue  = 8192
	batchSize = 512
	// requestTimeout bounds one request (the exporters' default, 10 s).
	requestTimeout = 10 * time.Second
	// pumpEvery is how often the forwarder looks in the ring.
	pumpEvery = 20 * time.Millisecond
)

// forwardOptions are the forwarder's, from the daemon (JSON, its last
// argument).
type forwardOptions struct {
	URL      string        `json:"url"`
	Retry    time.Duration `json:"retry"`
	Interval time.Duration `json:"interval"`
	Version  string        `json:"version"`
	Shutdown time.Duration `json:"shutdown"` // at most, to send what is left when told to finish
	// Socket is the daemon's, asked for its probes' log layouts and
	// formats (a record's body follows its probe's format = "...")
	Socket string `json:"socket,omitempty"`
}

// Forward is the forwarder process (gprobes otlp-forward OPTIONS): the
// ring is its descriptor 3, its reports go to descriptor 4, and it
// finishes when its standard input closes: it sends what the ring holds,
// for opts' shutdown time at most, and returns.
func Forward(optsJSON string) error {
	var o forwardOptions
	if err := json.Unmarshal([]byte(optsJSON), &o); err != nil {
		return fmt.Errorf("otlp-forward: options: %w", err)
	}
	idle(0)
	// one CPU at most (the SDK's goroutines and the collector's workers
	// would otherwise spread over idle CPUs), and fewer collections: the
	// SDK and protobuf allocate some 5 KB a record on a small heap
	runtime.GOMAXPROCS(1)
	debug.SetGCPercent(400)
	r, err := mapRing(3)
	if err != nil {
		return err
	}
	f, err := newForwarder(o, r, os.NewFile(4, "reports"))
	if err != nil {
		f.report(report{Warn: err.Error()})
		return err
	}
	idle(0) // the threads the SDK and gRPC started
	finish := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(finish) }()
	t := time.NewTicker(pumpEvery)
	defer t.Stop()
pumping:
	for {
		select {
		case <-t.C:
			f.pump()
		case <-finish:
			break pumping
		}
	}
	// told to finish: what the ring holds goes into the SDK (flushed when
	// it is full), then the SDK sends what it has, all within o.Shutdown
	ctx, cancel := context.WithTimeout(context.Background(), o.Shutdown)
	defer cancel()
	for f.pump(); f.ring.load(offHead) != f.tail && ctx.Err() == nil; f.pump() {
		f.provider.ForceFlush(ctx)
	}
	return f.provider.Shutdown(ctx)
}

// forwarder is the forwarder's state.
type forwarder struct {
	ring     *ring
	tail     uint64
	buf      []byte
	provider *sdklog.LoggerProvider
	logger   otellog.Logger
	inflight atomic.Int64 // records emitted and not yet exported (or failed)

	repMu   sync.Mutex
	reports io.Writer
	lastErr atomic.Pointer[error] // the last error an export returned (the SDK hands it to otel.Handle too)
	logs    *daemon.ProbeLogs     // the probes' layouts and formats; nil without the daemon's socket
}

func newForwarder(o forwardOptions, r *ring, reports io.Writer) (*forwarder, error) {
	f := &forwarder{ring: r, tail: r.load(offTail), reports: reports}
	if o.Socket != "" {
		f.logs = daemon.NewProbeLogs(o.Socket)
	}
	exp, err := newExporter(o)
	if err != nil {
		return f, err
	}
	res, err := resource.New(context.Background(),
		resource.WithAttributes(attribute.String("service.name", "gprobes"), attribute.String("service.version", o.Version)),
		resource.WithHost(), resource.WithFromEnv())
	if err != nil && res == nil {
		res = resource.Default()
	}
	exportTimeout := requestTimeout
	if o.Retry > 0 {
		exportTimeout = o.Retry + requestTimeout
	}
	bp := sdklog.NewBatchProcessor(&counting{Exporter: exp, f: f},
		sdklog.WithMaxQueueSize(sdkQueue), sdklog.WithExportMaxBatchSize(batchSize),
		sdklog.WithExportInterval(o.Interval), sdklog.WithExportTimeout(exportTimeout))
	// the keys of Record are distinct: the SDK need not look for twins
	// (a map per record, a third of its time)
	f.provider = sdklog.NewLoggerProvider(sdklog.WithResource(res), sdklog.WithProcessor(bp), sdklog.WithAllowKeyDuplication())
	f.logger = f.provider.Logger("github.com/gprobes/gprobes", otellog.WithInstrumentationVersion(o.Version))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(f.sdkError))
	return f, nil
}

// pump emits the records in the ring, as many as the SDK has room for,
// and returns how many.
func (f *forwarder) pump() int {
	ctx := context.Background()
	n := 0
	for f.inflight.Load() < sdkQueue {
		rec, after, ok := f.ring.next(f.tail, f.buf)
		if !ok {
			break
		}
		f.buf = rec[:0]
		var l daemon.LogLine
		if err := json.Unmarshal(rec, &l); err != nil {
			// not a record: counted as taken and failed, never sent
			f.report(report{Lost: []probeCount{{N: 1}}, Error: "a record the forwarder could not read: " + err.Error()})
		} else {
			f.inflight.Add(1)
			r := Record(&l)
			if f.logs != nil {
				if ls, format := f.logs.Of(&l); format != "" {
					r.SetBody(attribute.StringValue(formattedBody(&l, ls, format)))
				}
			}
			f.logger.Emit(ctx, r)
		}
		f.tail = after
		n++
	}
	if n > 0 {
		f.ring.done(f.tail, uint64(n))
	}
	return n
}

func (f *forwarder) report(r report) {
	b, _ := json.Marshal(r)
	f.repMu.Lock()
	f.reports.Write(append(b, '\n'))
	f.repMu.Unlock()
}

// sdkError is the process's OpenTelemetry error handler: the export
// failures counting reports are not said again; anything else is.
func (f *forwarder) sdkError(err error) {
	if last := f.lastErr.Load(); last != nil && errors.Is(err, *last) {
		return
	}
	f.report(report{Warn: err.Error()})
}

// newExporter makes the SDK's OTLP exporter for the URL.
func newExporter(o forwardOptions) (sdklog.Exporter, error) {
	if _, err := checkURL(o.URL); err != nil {
		return nil, err
	}
	u, _ := url.Parse(o.URL)
	ctx := context.Background()
	timeout := requestTimeout
	if o.Retry > 0 && o.Retry < timeout {
		timeout = o.Retry
	}
	retry := retryConfig(o.Retry)
	switch u.Scheme {
	case "grpc", "grpcs":
		opts := []otlploggrpc.Option{otlploggrpc.WithEndpoint(u.Host), otlploggrpc.WithTimeout(timeout),
			otlploggrpc.WithRetry(otlploggrpc.RetryConfig(retry))}
		if u.Scheme == "grpc" {
			opts = append(opts, otlploggrpc.WithInsecure())
		}
		return otlploggrpc.New(ctx, opts...)
	default:
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/logs"
		}
		hc, err := httpClient(u.Scheme == "https", timeout)
		if err != nil {
			return nil, err
		}
		opts := []otlploghttp.Option{otlploghttp.WithEndpoint(u.Host), otlploghttp.WithURLPath(u.Path),
			otlploghttp.WithHTTPClient(hc), otlploghttp.WithRetry(otlploghttp.RetryConfig(retry))}
		if u.Scheme == "http" {
			opts = append(opts, otlploghttp.WithInsecure())
		}
		return otlploghttp.New(ctx, opts...)
	}
}

// retrySettings are the exporters' retry policy (their RetryConfig, the
// same fields): from 1 s, doubling up to 5 s, for d in all (none when
// d < 0).
type retrySettings struct {
	Enabled         bool
	InitialInterval time.Duration
	MaxInterval     time.Duration
	MaxElapsedTime  time.Duration
}

func retryConfig(d time.Duration) retrySettings {
	if d < 0 {
		return retrySettings{}
	}
	return retrySettings{Enabled: true, InitialInterval: time.Second, MaxInterval: 5 * time.Second, MaxElapsedTime: d}
}

// httpClient is the OTLP/HTTP exporter's client. It is ours for one
// reason: the exporter retries a connection error only when Go calls it
// temporary, and a refused connection (a collector restarting) is not;
// refusedIsTemporary makes every failure to connect one that is retried,
// as gRPC retries UNAVAILABLE. The exporter then no longer reads the TLS
// variables itself, so this client does: OTEL_EXPORTER_OTLP[_LOGS]_CERTIFICATE
// (the CA), _CLIENT_CERTIFICATE and _CLIENT_KEY.
func httpClient(secure bool, timeout time.Duration) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if secure {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if ca := otlpEnv("CERTIFICATE"); ca != "" {
			pem, err := os.ReadFile(ca)
			if err != nil {
				return nil, err
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("%s: no PEM certificate", ca)
			}
			cfg.RootCAs = pool
		}
		if crt, key := otlpEnv("CLIENT_CERTIFICATE"), otlpEnv("CLIENT_KEY"); crt != "" && key != "" {
			pair, err := tls.LoadX509KeyPair(crt, key)
			if err != nil {
				return nil, err
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		tr.TLSClientConfig = cfg
	}
	return &http.Client{Transport: refusedIsTemporary{tr}, Timeout: timeout}, nil
}

// otlpEnv is OTEL_EXPORTER_OTLP_LOGS_<name>, or OTEL_EXPORTER_OTLP_<name>.
func otlpEnv(name string) string {
	if v := os.Getenv("OTEL_EXPORTER_OTLP_LOGS_" + name); v != "" {
		return v
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_" + name)
}

type refusedIsTemporary struct{ http.RoundTripper }

func (t refusedIsTemporary) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.RoundTripper.RoundTrip(r)
	var op *net.OpError
	if err != nil && errors.As(err, &op) && op.Op == "dial" {
		return nil, temporary{err}
	}
	return resp, err
}

// temporary is an error net/url's Temporary calls temporary.
type temporary struct{ error }

func (temporary) Temporary() bool { return true }
func (t temporary) Unwrap() error { return t.error }

// Record is the OpenTelemetry log record of a committed record: its time,
// severity INFO (WARN for an exception), a short body, and the fields of
// the log stream as attributes under the same names (docs/api.md).
func Record(l *daemon.LogLine) otellog.Record {
	var r otellog.Record
	r.SetTimestamp(l.Time)
	r.SetObservedTimestamp(time.Now())
	if l.Exception != "" || l.Kind == "exception" {
		r.SetSeverity(otellog.SeverityWarn)
		r.SetSeverityText("WARN")
	} else {
		r.SetSeverity(otellog.SeverityInfo)
		r.SetSeverityText("INFO")
	}
	r.SetBody(attribute.StringValue(body(l)))
	kv := make([]attribute.KeyValue, 0, 20)
	kv = append(kv,
		attribute.String("kind", l.Kind),
		attribute.String("target", l.Target),
		attribute.String("module", l.Module),
		attribute.Int("major", int(l.Major)),
		attribute.Int("minor", int(l.Minor)),
		attribute.String("location", l.Location),
		attribute.String("address", l.Address),
		attribute.Int("pid", l.Pid),
		attribute.Int("tid", l.Tid),
		attribute.Int("cpu", l.CPU),
		attribute.Int("exit", int(l.Exit)))
	if l.Probe != "" {
		kv = append(kv, attribute.String("probe", l.Probe))
	}
	if l.Data != "" {
		b, err := hex.DecodeString(l.Data)
		if err != nil {
			kv = append(kv, attribute.String("data", l.Data))
		} else {
			kv = append(kv, attribute.ByteSlice("data", b))
		}
	}
	if l.Truncated {
		kv = append(kv, attribute.Bool("truncated", true))
	}
	if l.Exception != "" {
		kv = append(kv, attribute.String("exception", l.Exception), attribute.Int64("pc", int64(l.PC)))
	}
	for _, s := range []struct{ k, v string }{{"line", l.Line}, {"dump", l.Dump}, {"debugger", l.Debugger}} {
		if s.v != "" {
			kv = append(kv, attribute.String(s.k, s.v))
		}
	}
	for i, st := range l.Stacks {
		kv = append(kv, attribute.String(probe.StackName(l.Stacks, i), st.Text()))
	}
	r.AddAttributes(kv...)
	return r
}

// body is the record's body: "log libc.so.6(1,1) opendir exit 1", or
// "exception libc.so.6(1,2) opendir invalid-address at pc 0x4".
func body(l *daemon.LogLine) string {
	loc := l.Location
	if l.Probe != "" {
		loc = l.Probe + " " + loc
	}
	s := fmt.Sprintf("%s %s(%d,%d) %s", l.Kind, l.Module, l.Major, l.Minor, loc)
	if l.Exception != "" {
		return s + fmt.Sprintf(" %s at pc %#x", l.Exception, l.PC)
	}
	return s + " exit " + strconv.Itoa(int(l.Exit))
}

// formattedBody is the body of a record of a probe with a format:
// "log hits(0,1) probed exit 1: probed(3, gamma)"; the plain body when
// the data fits none of the probe's layouts.
func formattedBody(l *daemon.LogLine, ls []rpn.Layout, format string) string {
	b, err := hex.DecodeString(l.Data)
	if err != nil || l.Exception != "" || l.Truncated {
		return body(l)
	}
	vals, ok := rpn.Split(ls, b)
	if !ok {
		return body(l)
	}
	return body(l) + ": " + rpn.FormatValues(format, vals)
}

// counting is the SDK exporter with the counts: every record the
// forwarder emitted ends here, sent (the ring's sent count) or not
// (reported to the daemon, per probe).
type counting struct {
	sdklog.Exporter
	f *forwarder
}

// partial matches the SDK's partial-success error: the receiver took the
// request but refused some records.
var partial = regexp.MustCompile(`^OTLP partial success: .* \((\d+) logs rejected\)$`)

func (c *counting) Export(ctx context.Context, records []sdklog.Record) error {
	f := c.f
	err := c.Exporter.Export(ctx, records)
	n := uint64(len(records))
	defer f.inflight.Add(-int64(n))
	if err == nil {
		f.ring.add(offSent, n)
		return nil
	}
	if rejected, ok := partialSuccess(err); ok {
		// which ones the receiver does not say: counted against the
		// first records of the request
		rejected = min(rejected, n)
		f.ring.add(offSent, n-rejected)
		f.report(report{Lost: byProbe(records[:rejected]), Error: err.Error()})
		return nil
	}
	f.report(report{Lost: byProbe(records), Error: err.Error()})
	f.lastErr.Store(&err)
	return err
}

func partialSuccess(err error) (uint64, bool) {
	var total uint64
	for _, line := range strings.Split(err.Error(), "\n") {
		m := partial.FindStringSubmatch(line)
		if m == nil {
			return 0, false
		}
		n, _ := strconv.ParseUint(m[1], 10, 64)
		total += n
	}
	return total, true
}

// byProbe counts records by probe (target, module, minor attributes).
func byProbe(records []sdklog.Record) []probeCount {
	var out []probeCount
	at := map[[2]string]map[uint16]int{}
	for i := range records {
		var target, module string
		var minor uint16
		records[i].WalkAttributes(func(kv attribute.KeyValue) bool {
			switch kv.Key {
			case "target":
				target = kv.Value.AsString()
			case "module":
				module = kv.Value.AsString()
			case "minor":
				minor = uint16(kv.Value.AsInt64())
			}
			return true
		})
		k := [2]string{target, module}
		if at[k] == nil {
			at[k] = map[uint16]int{}
		}
		j, ok := at[k][minor]
		if !ok {
			j = len(out)
			at[k][minor] = j
			out = append(out, probeCount{Target: target, Module: module, Minor: minor})
		}
		out[j].N++
	}
	return out
}
