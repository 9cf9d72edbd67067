package metrics

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gprobes/gprobes/daemon"
	"github.com/gprobes/gprobes/probe"
)

// source is a daemon as the collector sees it.
type source struct {
	probes []daemon.TargetProbe
	status daemon.StatusResponse
}

func (s *source) Probes(string) []daemon.TargetProbe { return s.probes }
func (s *source) Status() daemon.StatusResponse      { return s.status }

// exporter is an exporter that counts per probe.
type exporter struct{}

func (exporter) Name() string                            { return "otlp" }
func (exporter) Export(*daemon.LogLine, []byte)          {}
func (exporter) Status() daemon.ExportStatus             { return daemon.ExportStatus{} }
func (exporter) Shutdown(context.Context) error          { return nil }
func (exporter) LostOf(t, m string, minor uint16) uint64 { return uint64(minor) * 100 }

func fixture() *source {
	p := func(target string, minor uint16, loc, kind string, hits, lost, inTarget uint64, state probe.State) daemon.TargetProbe {
		return daemon.TargetProbe{Target: target, Lost: lost + inTarget, SyslogLost: 1,
			Info: probe.Info{Module: "/bin/w", Minor: minor, Location: loc, Kind: kind, Hits: hits, Skipped: 2, Faults: 3,
				Missed: 4, Dropped: 5, Lost: inTarget, State: state}}
	}
	return &source{
		probes: []daemon.TargetProbe{
			p("pid:1", 1, "work", "", 10, 7, 0, probe.StateActive),
			p("pid:1", 2, "work", "retprobe", 20, 0, 9, probe.StateActive),
			p("pid:1", 2, "work", "retprobe", 99, 0, 0, probe.StateActive), // the same probe twice: one series
			p("pid:2", 1, "work", "", 30, 0, 0, probe.StateGone),
		},
		status: daemon.StatusResponse{Since: time.Unix(1700000000, 0),
			Targets:       map[string]string{"pid:1": "running", "pid:2": "gone: process exited 0", "gdb:h:1": "opening"},
			LogStatus:     daemon.LogStatus{Written: 60, SyslogWritten: 58, Lost: daemon.LossSummary{Records: 7}, SyslogLost: daemon.LossSummary{Records: 2}, LogSize: 4096, Rotations: 1},
			LostInTargets: 9,
			Exporters:     map[string]daemon.ExportStatus{"otlp": {Sent: 50, Queued: 3, QueueFull: 4, Failed: 3}},
		},
	}
}

// The metrics pass the Prometheus linter (naming conventions: _total for
// counters, base units, help text), and say what the daemon says.
func TestCollector(t *testing.T) {
	c := New(fixture(), exporter{})
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	want := `
# HELP gprobes_probe_hits_total Hits of the probe whose program ran.
# TYPE gprobes_probe_hits_total counter
gprobes_probe_hits_total{kind="offset",location="work",minor="1",module="/bin/w",target="pid:1"} 10
gprobes_probe_hits_total{kind="retprobe",location="work",minor="2",module="/bin/w",target="pid:1"} 20
gprobes_probe_hits_total{kind="offset",location="work",minor="1",module="/bin/w",target="pid:2"} 30
# HELP gprobes_target_state The target's state: 1 for the current one of running, opening and gone (the process ended, or its stub went away).
# TYPE gprobes_target_state gauge
gprobes_target_state{state="gone",target="gdb:h:1"} 0
gprobes_target_state{state="opening",target="gdb:h:1"} 1
gprobes_target_state{state="running",target="gdb:h:1"} 0
gprobes_target_state{state="gone",target="pid:1"} 0
gprobes_target_state{state="opening",target="pid:1"} 0
gprobes_target_state{state="running",target="pid:1"} 1
gprobes_target_state{state="gone",target="pid:2"} 1
gprobes_target_state{state="opening",target="pid:2"} 0
gprobes_target_state{state="running",target="pid:2"} 0
# HELP gprobes_otlp_records_dropped_total Records not sent to the OTLP receiver: reason=queue_full, dropped as they came (the queue was full); reason=failed, sent and not accepted once the retries ran out.
# TYPE gprobes_otlp_records_dropped_total counter
gprobes_otlp_records_dropped_total{reason="failed"} 3
gprobes_otlp_records_dropped_total{reason="queue_full"} 4
# HELP gprobes_log_records_written_total Records written to the log file (sink=file) or taken by syslog (sink=syslog).
# TYPE gprobes_log_records_written_total counter
gprobes_log_records_written_total{sink="file"} 60
gprobes_log_records_written_total{sink="syslog"} 58
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "gprobes_probe_hits_total", "gprobes_target_state",
		"gprobes_otlp_records_dropped_total", "gprobes_log_records_written_total"); err != nil {
		t.Error(err)
	}
	lost := `
# HELP gprobes_probe_lost_records_total Records of the probe lost on the way: where=target, the target dropped them (a jump pad's full ring: lost everywhere); log, the log file did not take them; syslog, syslog did not get them; otlp, not sent to the OTLP receiver.
# TYPE gprobes_probe_lost_records_total counter
gprobes_probe_lost_records_total{kind="offset",location="work",minor="1",module="/bin/w",target="pid:1",where="log"} 7
gprobes_probe_lost_records_total{kind="offset",location="work",minor="1",module="/bin/w",target="pid:1",where="otlp"} 100
gprobes_probe_lost_records_total{kind="offset",location="work",minor="1",module="/bin/w",target="pid:1",where="syslog"} 1
gprobes_probe_lost_records_total{kind="offset",location="work",minor="1",module="/bin/w",target="pid:1",where="target"} 0
gprobes_probe_lost_records_total{kind="retprobe",location="work",minor="2",module="/bin/w",target="pid:1",where="log"} 0
gprobes_probe_lost_records_total{kind="retprobe",location="work",minor="2",module="/bin/w",target="pid:1",where="otlp"} 200
gprobes_probe_lost_records_total{kind="retprobe",location="work",minor="2",module="/bin/w",target="pid:1",where="syslog"} 1
gprobes_probe_lost_records_total{kind="retprobe",location="work",minor="2",module="/bin/w",target="pid:1",where="target"} 9
gprobes_probe_lost_records_total{kind="offset",location="work",minor="1",module="/bin/w",target="pid:2",where="log"} 0
gprobes_probe_lost_records_total{kind="offset",location="work",minor="1",module="/bin/w",target="pid:2",where="otlp"} 100
gprobes_probe_lost_records_total{kind="offset",location="work",minor="1",module="/bin/w",target="pid:2",where="syslog"} 1
gprobes_probe_lost_records_total{kind="offset",location="work",minor="1",module="/bin/w",target="pid:2",where="target"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(lost), "gprobes_probe_lost_records_total"); err != nil {
		t.Error(err)
	}
}
