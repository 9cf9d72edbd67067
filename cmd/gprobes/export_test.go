package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gprobes/gprobes/daemon"
	"github.com/gprobes/gprobes/internal/otlptest"
)

// exportProbes writes the probes of these tests for the hits fixture:
// minor 1 logs probed's first argument (i, 0..n-1), minor 2 on f_push
// reads address 8 and faults at every hit (an exception record).
func exportProbes(t *testing.T, hits string, faulting bool) string {
	t.Helper()
	src := fmt.Sprintf("name = %s\nmodtype = user\noffset = probed\nminor = 1\npush r,rdi\nlog 1\nexit 1\n", hits)
	if faulting {
		src += "offset = f_push\nminor = 2\npush d,8\npush mrf\nlog 1\nexit 1\n"
	}
	p := filepath.Join(t.TempDir(), "export.dpdf")
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// execHits inserts the probes into a new run of the fixture (exec:, so
// every call is probed) and returns the target's name.
func execHits(t *testing.T, sock, hits, probes string, n int) string {
	t.Helper()
	out := mustRun(t, "insert", "--socket", sock, "--json", "--target", fmt.Sprintf("exec:%s -n %d", hits, n), probes)
	var resp daemon.InsertResponse
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("insert: %v %s", err, out)
	}
	return resp.Target
}

func daemonStatus(t *testing.T, sock string) daemon.StatusResponse {
	t.Helper()
	var st daemon.StatusResponse
	out := mustRun(t, "status", "--socket", sock, "--json")
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v %s", err, out)
	}
	return st
}

// waitStatus polls the daemon's status until ok says yes.
func waitStatus(t *testing.T, sock, what string, d time.Duration, ok func(daemon.StatusResponse) bool) daemon.StatusResponse {
	t.Helper()
	for end := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
		st := daemonStatus(t, sock)
		if ok(st) {
			return st
		}
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v: %+v", what, d, st)
		}
	}
}

func gone(target string) func(daemon.StatusResponse) bool {
	return func(st daemon.StatusResponse) bool { return strings.HasPrefix(st.Targets[target], "gone") }
}

// probeCounts are query's hits and faults by minor.
func probeCounts(t *testing.T, sock, target string) (hits, faults map[uint16]uint64) {
	t.Helper()
	var q struct{ Probes []daemon.TargetProbe }
	out := mustRun(t, "query", "--socket", sock, "--all", "--json")
	if err := json.Unmarshal([]byte(out), &q); err != nil {
		t.Fatal(err)
	}
	hits, faults = map[uint16]uint64{}, map[uint16]uint64{}
	for _, p := range q.Probes {
		if p.Target == target {
			hits[p.Minor], faults[p.Minor] = p.Hits, p.Faults
		}
	}
	return hits, faults
}

// gprobes daemon --otlp: the records of a real probe in a real process
// reach the OpenTelemetry Collector's own OTLP receiver, over gRPC and
// over HTTP, with their fields as attributes, the exceptions as WARN;
// status counts them sent.
func TestOTLPExport(t *testing.T) {
	hits := buildHits(t)
	rcv, err := otlptest.Start("auto", "auto")
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close()
	probes := exportProbes(t, hits, true)
	const n = 40
	for _, url := range []string{"grpc://" + rcv.GRPC, "http://" + rcv.HTTP} {
		proto := url[:strings.Index(url, ":")]
		t.Run(proto, func(t *testing.T) {
			dir := t.TempDir()
			sock, state := filepath.Join(dir, "d.sock"), filepath.Join(dir, "state")
			_, dout := daemonProcess(t, sock, state, "--otlp", url)
			target := execHits(t, sock, hits, probes, n)
			waitStatus(t, sock, "the fixture's end", 30*time.Second, gone(target))
			h, f := probeCounts(t, sock, target)
			if h[1] != n || f[2] == 0 || f[2] != h[2] {
				t.Fatalf("query: hits %v faults %v; want %d hits of minor 1, every hit of minor 2 faulted", h, f, n)
			}
			want := int(h[1] + f[2])
			mine := func() []otlptest.Record {
				var out []otlptest.Record
				for _, r := range rcv.Records() {
					if r.Attrs["target"] == target {
						out = append(out, r)
					}
				}
				return out
			}
			for end := time.Now().Add(time.Minute); len(mine()) < want; time.Sleep(50 * time.Millisecond) {
				if time.Now().After(end) {
					t.Fatalf("%d of %d records arrived\n%s", len(mine()), want, dout)
				}
			}
			pid := int64(0)
			fmt.Sscanf(target, "pid:%d", &pid)
			seen := map[uint64]bool{}
			exceptions := 0
			for _, r := range mine() {
				a := r.Attrs
				if a["module"] != hits || a["major"] != int64(0) || a["pid"] != pid || a["tid"] != pid || a["cpu"] != int64(0) ||
					!strings.HasPrefix(a["address"].(string), "0x") || r.Resource["service.name"] != "gprobes" || r.Time == 0 {
					t.Fatalf("record %v resource %v", a, r.Resource)
				}
				switch a["minor"] {
				case int64(1):
					d, _ := a["data"].([]byte)
					if a["kind"] != "log" || a["location"] != "probed" || a["exit"] != int64(1) || len(d) != 8 || r.SeverityText != "INFO" || r.Body != fmt.Sprintf("log %s(0,1) probed exit 1", hits) {
						t.Fatalf("record %v %s %q", a, r.SeverityText, r.Body)
					}
					seen[binary.LittleEndian.Uint64(d)] = true
				case int64(2):
					if a["kind"] != "exception" || a["location"] != "f_push" || a["exception"] != "invalid-address" || r.SeverityText != "WARN" ||
						!strings.HasSuffix(a["line"].(string), "export.dpdf:11:1") || a["data"] != nil {
						t.Fatalf("exception record %v %s", a, r.SeverityText)
					}
					exceptions++
				default:
					t.Fatalf("record of minor %v", a["minor"])
				}
			}
			if len(seen) != n || exceptions != int(f[2]) {
				t.Errorf("%d distinct arguments (want %d), %d exceptions (want %d)", len(seen), n, exceptions, f[2])
			}
			for i := range uint64(n) {
				if !seen[i] {
					t.Errorf("no record of probed(%d)", i)
				}
			}
			// the receiver has them before the exporter has its answer:
			// the status counts them sent a moment later
			st := waitStatus(t, sock, "the exporter to count them sent", time.Minute, func(st daemon.StatusResponse) bool {
				e := st.Exporters["otlp"]
				return e.Sent+e.Dropped.Records >= uint64(want)
			})
			e := st.Exporters["otlp"]
			if e.Sent != uint64(want) || e.Dropped.Records != 0 || e.Queued != 0 || !strings.HasPrefix(e.Endpoint, proto+"://") {
				t.Errorf("status exporters: %+v", st.Exporters)
			}
			if st.Written != uint64(want) {
				t.Errorf("log file: %d written, want %d", st.Written, want)
			}
		})
	}
}

// An OTLP receiver that is not there: the daemon keeps serving, the
// batches are sent again until the receiver comes (nothing lost), and when
// it never comes the records are counted: status, metrics, a log line.
func TestOTLPUnreachable(t *testing.T) {
	hits := buildHits(t)
	probes := exportProbes(t, hits, false)
	const n = 20
	t.Run("retried", func(t *testing.T) {
		addr, err := otlptest.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		sock, state := filepath.Join(dir, "d.sock"), filepath.Join(dir, "state")
		_, dout := daemonProcess(t, sock, state, "--otlp", "grpc://"+addr)
		target := execHits(t, sock, hits, probes, n)
		waitStatus(t, sock, "the fixture's end", 30*time.Second, gone(target))
		// not a wait: an export or two fail meanwhile; nothing is lost
		// while the receiver is away, however long (checked below)
		time.Sleep(1500 * time.Millisecond)
		st := daemonStatus(t, sock)
		if e := st.Exporters["otlp"]; e.Sent != 0 || e.Queued != n || e.Dropped.Records != 0 {
			t.Fatalf("before the receiver: %+v", e)
		}
		if h, _ := probeCounts(t, sock, target); h[1] != n {
			t.Fatalf("query meanwhile: %v", h)
		}
		rcv, err := otlptest.Start(addr, "")
		if err != nil {
			t.Fatal(err)
		}
		defer rcv.Close()
		waitStatus(t, sock, "the records retried", 30*time.Second, func(st daemon.StatusResponse) bool { return st.Exporters["otlp"].Sent == n })
		if rcv.Count() != n {
			t.Errorf("the receiver has %d records, want %d\n%s", rcv.Count(), n, dout)
		}
	})
	t.Run("counted", func(t *testing.T) {
		addr, err := otlptest.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		sock, state := filepath.Join(dir, "d.sock"), filepath.Join(dir, "state")
		d, dout := daemonProcess(t, sock, state, "--otlp", "http://"+addr, "--otlp-retry", "2s")
		target := execHits(t, sock, hits, probes, n)
		st := waitStatus(t, sock, "the records counted", 30*time.Second, func(st daemon.StatusResponse) bool {
			return st.Exporters["otlp"].Failed == n
		})
		if e := st.Exporters["otlp"]; e.Dropped.Records != n || e.Sent != 0 || e.QueueFull != 0 || !strings.Contains(e.Dropped.LastError, addr) {
			t.Errorf("status: %+v", e)
		}
		if st.Written != n {
			t.Errorf("the log file has %d records, want %d", st.Written, n)
		}
		out := mustRun(t, "status", "--socket", sock)
		if !strings.Contains(out, fmt.Sprintf("%d dropped (0 with the queue full, %d not accepted; the last at", n, n)) {
			t.Errorf("gprobes status:\n%s", out)
		}
		fams := scrape(t, sock, "")
		if v := value(t, fams, "gprobes_otlp_records_dropped_total", map[string]string{"reason": "failed"}); v != n {
			t.Errorf("gprobes_otlp_records_dropped_total{reason=failed} %v", v)
		}
		if v := value(t, fams, "gprobes_probe_lost_records_total", map[string]string{"target": target, "minor": "1", "where": "otlp"}); v != n {
			t.Errorf("gprobes_probe_lost_records_total{where=otlp} %v", v)
		}
		for end := time.Now().Add(time.Minute); !strings.Contains(dout.String(), "otlp: records are being dropped"); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("no word of it from the daemon:\n%s", dout)
			}
		}
		d.Process.Signal(os.Interrupt)
		d.Wait()
		if !strings.Contains(dout.String(), fmt.Sprintf("otlp: 0 records sent to http://%s/v1/logs, %d dropped", addr, n)) {
			t.Errorf("the daemon's last word:\n%s", dout)
		}
	})
}

// scrape reads the metrics at http://addr/metrics, or on the socket when
// addr is "", with the Prometheus library's own parser.
func scrape(t *testing.T, sock, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	hc := http.DefaultClient
	url := "http://" + addr + "/metrics"
	if addr == "" {
		hc = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}
		url = "http://gprobes/metrics"
	}
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return fams
}

// value is the value of the one series of the family whose labels include
// these; it fails the test when there is not exactly one.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Fatalf("no metric %s", name)
	}
	var found []*dto.Metric
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		found = append(found, m)
	}
	if len(found) != 1 {
		t.Fatalf("%s%v: %d series", name, labels, len(found))
	}
	switch f.GetType() {
	case dto.MetricType_COUNTER:
		return found[0].GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		return found[0].GetGauge().GetValue()
	}
	t.Fatalf("%s is a %v", name, f.GetType())
	return 0
}

// gprobes daemon --metrics: scraped on its port and on its socket, parsed
// with the Prometheus library's parser, the counts are those of a real
// probe's known hits.
func TestMetrics(t *testing.T) {
	hits := buildHits(t)
	probes := exportProbes(t, hits, true)
	const n = 50
	dir := t.TempDir()
	sock, state := filepath.Join(dir, "d.sock"), filepath.Join(dir, "state")
	daemonProcess(t, sock, state, "--metrics", "127.0.0.1:0")
	target := execHits(t, sock, hits, probes, n)
	st := waitStatus(t, sock, "the fixture's end", 30*time.Second, gone(target))
	if st.Metrics == "" {
		t.Fatal("status says no metrics address")
	}
	h, f := probeCounts(t, sock, target)
	if h[1] != n || f[2] == 0 {
		t.Fatalf("query: hits %v faults %v", h, f)
	}
	for _, addr := range []string{st.Metrics, ""} {
		fams := scrape(t, sock, addr)
		p1 := map[string]string{"target": target, "module": hits, "minor": "1", "location": "probed", "kind": "offset"}
		p2 := map[string]string{"target": target, "module": hits, "minor": "2", "location": "f_push", "kind": "offset"}
		with := func(l map[string]string, k, v string) map[string]string {
			out := map[string]string{k: v}
			for a, b := range l {
				out[a] = b
			}
			return out
		}
		for _, c := range []struct {
			name   string
			labels map[string]string
			want   float64
		}{
			{"gprobes_probe_hits_total", p1, n},
			{"gprobes_probe_faults_total", p1, 0},
			{"gprobes_probe_skipped_total", p1, 0},
			{"gprobes_probe_missed_total", p1, 0},
			{"gprobes_probe_hits_total", p2, float64(h[2])},
			{"gprobes_probe_faults_total", p2, float64(f[2])},
			{"gprobes_probe_lost_records_total", with(p1, "where", "log"), 0},
			{"gprobes_probe_lost_records_total", with(p1, "where", "target"), 0},
			{"gprobes_probe_lost_records_total", with(p1, "where", "syslog"), 0},
			{"gprobes_probe_state", with(p1, "state", "gone"), 1},
			{"gprobes_target_state", map[string]string{"target": target, "state": "gone"}, 1},
			{"gprobes_target_state", map[string]string{"target": target, "state": "running"}, 0},
			{"gprobes_log_records_written_total", map[string]string{"sink": "file"}, float64(n + f[2])},
			{"gprobes_log_records_lost_total", map[string]string{"sink": "file"}, 0},
			{"gprobes_target_lost_records_total", nil, 0},
		} {
			if v := value(t, fams, c.name, c.labels); v != c.want {
				t.Errorf("%s %s%v = %v, want %v", map[bool]string{true: "socket", false: addr}[addr == ""], c.name, c.labels, v, c.want)
			}
		}
		if fams["gprobes_otlp_records_sent_total"] != nil {
			t.Error("OTLP metrics without --otlp")
		}
		for _, name := range []string{"gprobes_daemon_start_time_seconds", "gprobes_log_file_size_bytes", "go_goroutines", "process_resident_memory_bytes"} {
			if fams[name] == nil {
				t.Errorf("no %s", name)
			}
		}
	}
}
