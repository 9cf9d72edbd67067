package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/probe"
)

// An Exporter sends a copy of every committed record somewhere else than
// the log (OpenTelemetry: package otlp). The daemon hands it each record
// as the log file gets it, on the path of the probed thread: Export must
// not block; a record it cannot take is counted in its Status, never
// waited for.
type Exporter interface {
	// Name is its key in /v1/status's "exporters" ("otlp").
	Name() string
	// Export takes the record and its line as the log stream has it (without
	// the newline); line is valid during the call only, l is never
	// changed after it.
	Export(l *LogLine, line []byte)
	Status() ExportStatus
	// Shutdown sends what is still queued, for as long as ctx lets it,
	// counts the rest as dropped and stops.
	Shutdown(ctx context.Context) error
}

// ExportStatus is what an exporter sent and what it could not
// (docs/api.md, "Exporters").
type ExportStatus struct {
	Endpoint string `json:"endpoint"`
	Sent     uint64 `json:"sent"`   // records the receiver accepted
	Queued   uint64 `json:"queued"` // records waiting to be sent, or being sent
	// Dropped: records it could not send, with the first and the last
	// reason; QueueFull of them never got in line (the queue was full),
	// Failed were sent and not accepted (the receiver unreachable once the
	// retries ran out, or refusing them).
	Dropped   LossSummary `json:"dropped"`
	QueueFull uint64      `json:"dropped_queue_full"`
	Failed    uint64      `json:"dropped_failed"`
}

// extensions are what the daemon does besides its log: exporters and the
// Prometheus metrics. Set before Listen.
type extensions struct {
	exporters   []Exporter
	metrics     http.Handler
	metricsAddr string
	metricsSrv  *http.Server
}

// AddExporter makes the daemon hand every committed record to e from now
// on; Shutdown shuts e down once every target is let go. Call it before
// Listen.
func (s *Server) AddExporter(e Exporter) {
	s.ext.exporters = append(s.ext.exporters, e)
	s.log.Tee = s.export
}

// export hands a record to every exporter (LogWriter.Tee).
func (s *Server) export(l *LogLine, line []byte) {
	for _, e := range s.ext.exporters {
		e.Export(l, line)
	}
}

// ServeMetrics serves h (the Prometheus metrics: package metrics) at GET
// /metrics on the daemon's socket and, when addr is not empty, on a TCP
// listener of its own at addr (host:port; port 0 picks one, MetricsAddr
// says which), with the socket's limits (set Limits first). Call it
// before Listen.
func (s *Server) ServeMetrics(h http.Handler, addr string) error {
	s.ext.metrics = h
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", s.bounded(noBody, h.ServeHTTP))
	mux.HandleFunc("GET /{$}", s.bounded(noBody, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<html><head><title>gprobes</title></head><body><a href="/metrics">metrics</a></body></html>`+"\n")
	}))
	cl := newConnLimiter(ln, s.Limits.maxConns())
	srv := s.Limits.httpServer(mux, cl)
	s.ext.metricsAddr = ln.Addr().String()
	s.ext.metricsSrv = srv
	go srv.Serve(cl)
	return nil
}

// MetricsAddr is the address ServeMetrics listens on, "" if none.
func (s *Server) MetricsAddr() string { return s.ext.metricsAddr }

// commit is the engines' sink: the record goes to the log (file and
// syslog) and, through LogWriter.Tee, to each exporter. It runs on the
// probed thread's path.
func (s *Server) commit(target string, r *probe.Record) {
	l := FromRecord(target, r)
	s.log.Write(&l)
}

// targetSink is a target's engine's sink: a record at a time from the
// int3 route (written before the thread goes on), a batch from a jump
// pad's ring (written with a write(2) per megabyte of lines).
type targetSink struct {
	s     *Server
	t     *target
	lines []LogLine
}

func (k *targetSink) Commit(r *probe.Record) { k.s.commit(k.t.name, r) }

func (k *targetSink) CommitBatch(recs []*probe.Record) {
	k.lines = k.lines[:0]
	for _, r := range recs {
		k.lines = append(k.lines, FromRecord(k.t.name, r))
	}
	k.s.log.WriteBatch(k.lines)
	clear(k.lines)
}

// routeMetrics adds GET /metrics to the socket's API when ServeMetrics
// gave a handler.
func (s *Server) routeMetrics(mux *http.ServeMux) {
	if s.ext.metrics != nil {
		mux.HandleFunc("GET /metrics", s.bounded(noBody, s.ext.metrics.ServeHTTP))
	}
}

// exporterTimeout bounds what Shutdown waits for the exporters to send
// what they still hold.
const exporterTimeout = 5 * time.Second

// closeExtensions stops the metrics listener and shuts the exporters
// down, in parallel, exporterTimeout at most.
func (s *Server) closeExtensions() error {
	if s.ext.metricsSrv != nil {
		s.ext.metricsSrv.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), exporterTimeout)
	defer cancel()
	errs := make([]error, len(s.ext.exporters))
	var wg sync.WaitGroup
	for i, e := range s.ext.exporters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := e.Shutdown(ctx); err != nil {
				errs[i] = fmt.Errorf("%s: %w", e.Name(), err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Status is what /v1/status answers.
func (s *Server) Status() StatusResponse {
	s.mu.Lock()
	st := StatusResponse{Pid: os.Getpid(), Socket: s.socket, State: s.state, Log: s.log.Path(), Since: s.started,
		Targets: map[string]string{}, LogStatus: s.log.Status(), Metrics: s.ext.metricsAddr}
	all := make(map[string]*target, len(s.targets))
	for n, t := range s.targets {
		all[n] = t
		if !t.ready() {
			st.Targets[n] = "opening"
		}
	}
	s.mu.Unlock()
	for n, t := range all {
		if st.Targets[n] != "" {
			continue
		}
		if g := t.eng.EndReason(); g != "" {
			st.Targets[n] = "gone: " + g
		} else {
			st.Targets[n] = "running"
		}
		if d, ok := t.eng.(interface{ Describe() string }); ok && d.Describe() != "" {
			st.Targets[n] += "; guest kernel " + d.Describe()
		}
		if k, ok := t.eng.(interface{ Abilities() []bpf.Ability }); ok {
			st.KernelAbilities = k.Abilities()
		}
	}
	st.LostInTargets = s.targetLost()
	for _, e := range s.ext.exporters {
		if st.Exporters == nil {
			st.Exporters = map[string]ExportStatus{}
		}
		st.Exporters[e.Name()] = e.Status()
	}
	return st
}

// Socket is the socket the daemon serves: its --socket, or the one
// systemd passed (activation.go).
func (s *Server) Socket() string { return s.socket }
