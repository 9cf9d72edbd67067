package metrics

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gprobes/gprobes/daemon"
	"github.com/gprobes/gprobes/probe"
)

// Source is what the Collector reads: the daemon (*daemon.Server).
type Source interface {
	Probes(module string) []daemon.TargetProbe
	Status() daemon.StatusResponse
}

// ProbeLosses is an exporter that counts its dropped records per probe
// (package otlp's Exporter): they are gprobes_probe_lost_records_total
// with where set to its name.
type ProbeLosses interface {
	Name() string
	LostOf(target, module string, minor uint16) uint64
}

// probeLabels are every per-probe metric's labels.
var probeLabels = []string{"target", "module", "minor", "location", "kind"}

// targetStates are the values of gprobes_target_state's state label.
var targetStates = []string{"running", "opening", "gone"}

// Collector is a prometheus.Collector of a daemon's counts.
type Collector struct {
	src      Source
	exporter []ProbeLosses

	hits, skipped, faults, missed, dropped, lost, probeState *prometheus.Desc
	targetState, lostInTargets                               *prometheus.Desc
	written, logLost, logSize, rotations, started            *prometheus.Desc
	exp                                                      map[string]exporterDescs
}

type exporterDescs struct{ sent, dropped, queued *prometheus.Desc }

// New is the collector of src's counts; exporters are the daemon's
// (--otlp), whose sent and dropped records it reports too.
func New(src Source, exporters ...daemon.Exporter) *Collector {
	probe := func(name, help string, extra ...string) *prometheus.Desc {
		return prometheus.NewDesc("gprobes_probe_"+name, help, append(append([]string{}, probeLabels...), extra...), nil)
	}
	c := &Collector{src: src,
		hits:    probe("hits_total", "Hits of the probe whose program ran."),
		skipped: probe("skipped_total", "Hits of the probe that did not run its program (the probe was disabled, or its pass count not reached)."),
		faults:  probe("faults_total", "Hits whose program faulted (an exception record)."),
		missed:  probe("missed_total", "Hits whose program could not run: the kernel skipped them, or a return probe's calls beyond maxactive."),
		dropped: probe("dropped_total", "A return probe's calls whose return was never seen (query's DROPPED): their records were never made."),
		lost: probe("lost_records_total", "Records of the probe lost on the way: where=target, the target dropped them (a jump pad's full ring: "+
			"lost everywhere); log, the log file did not take them; syslog, syslog did not get them; otlp, not sent to the OTLP receiver.", "where"),
		probeState: probe("state", "The probe's state, as a label: 1 for its current state (active, pending, disabled, mismatch, refused, gone, removed).", "state"),
		targetState: prometheus.NewDesc("gprobes_target_state", "The target's state: 1 for the current one of running, opening and gone (the process ended, or its stub went away).",
			[]string{"target", "state"}, nil),
		lostInTargets: prometheus.NewDesc("gprobes_target_lost_records_total", "Records the targets dropped (jump pads' full rings), closed targets included.", nil, nil),
		written:       prometheus.NewDesc("gprobes_log_records_written_total", "Records written to the log file (sink=file) or taken by syslog (sink=syslog).", []string{"sink"}, nil),
		logLost:       prometheus.NewDesc("gprobes_log_records_lost_total", "Committed records the log file (sink=file) or syslog (sink=syslog) did not take.", []string{"sink"}, nil),
		logSize:       prometheus.NewDesc("gprobes_log_file_size_bytes", "Size of the current log file.", nil, nil),
		rotations:     prometheus.NewDesc("gprobes_log_rotations_total", "Rotations of the log file.", nil, nil),
		started:       prometheus.NewDesc("gprobes_daemon_start_time_seconds", "When the daemon started, seconds since the Unix epoch.", nil, nil),
		exp:           map[string]exporterDescs{},
	}
	for _, e := range exporters {
		n := e.Name()
		c.exp[n] = exporterDescs{
			sent:    prometheus.NewDesc("gprobes_"+n+"_records_sent_total", "Records the "+strings.ToUpper(n)+" receiver accepted.", nil, nil),
			dropped: prometheus.NewDesc("gprobes_"+n+"_records_dropped_total", "Records not sent to the "+strings.ToUpper(n)+" receiver: reason=queue_full, dropped as they came (the queue was full); reason=failed, sent and not accepted once the retries ran out.", []string{"reason"}, nil),
			queued:  prometheus.NewDesc("gprobes_"+n+"_records_queued", "Records on their way to the "+strings.ToUpper(n)+" receiver.", nil, nil),
		}
		if pl, ok := e.(ProbeLosses); ok {
			c.exporter = append(c.exporter, pl)
		}
	}
	return c
}

// Describe sends every descriptor.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.hits, c.skipped, c.faults, c.missed, c.dropped, c.lost, c.probeState,
		c.targetState, c.lostInTargets, c.written, c.logLost, c.logSize, c.rotations, c.started} {
		ch <- d
	}
	for _, e := range c.exp {
		ch <- e.sent
		ch <- e.dropped
		ch <- e.queued
	}
}

// Collect reads the daemon's counts.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.src.Status()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	seen := map[[4]string]bool{}
	for _, p := range c.src.Probes("") {
		minor := strconv.Itoa(int(p.Minor))
		key := [4]string{p.Target, p.Module, minor, p.Kind}
		if seen[key] {
			continue // one series per probe: the same minor twice would make the scrape fail
		}
		seen[key] = true
		kind := p.Kind
		if kind == "" {
			kind = "offset"
		}
		l := []string{p.Target, p.Module, minor, p.Location, kind}
		counter(c.hits, p.Hits, l...)
		counter(c.skipped, p.Skipped, l...)
		counter(c.faults, p.Faults, l...)
		counter(c.missed, p.Missed, l...)
		counter(c.dropped, p.Dropped, l...)
		inTarget := p.Info.Lost // TargetProbe.Lost is the file's and the target's
		counter(c.lost, inTarget, append(l, "target")...)
		counter(c.lost, p.Lost-min(inTarget, p.Lost), append(l, "log")...)
		counter(c.lost, p.SyslogLost, append(l, "syslog")...)
		for _, e := range c.exporter {
			counter(c.lost, e.LostOf(p.Target, p.Module, p.Minor), append(l, e.Name())...)
		}
		gauge(c.probeState, 1, append(l, string(stateOf(p.State)))...)
	}
	for t, s := range st.Targets {
		cur := s
		if strings.HasPrefix(s, "gone") {
			cur = "gone"
		}
		for _, state := range targetStates {
			v := 0.0
			if state == cur {
				v = 1
			}
			gauge(c.targetState, v, t, state)
		}
	}
	counter(c.lostInTargets, st.LostInTargets)
	counter(c.written, st.Written, "file")
	counter(c.written, st.SyslogWritten, "syslog")
	counter(c.logLost, st.Lost.Records, "file")
	counter(c.logLost, st.SyslogLost.Records, "syslog")
	gauge(c.logSize, float64(st.LogSize))
	counter(c.rotations, st.Rotations)
	gauge(c.started, float64(st.Since.UnixNano())/1e9)
	for name, d := range c.exp {
		es := st.Exporters[name]
		counter(d.sent, es.Sent)
		counter(d.dropped, es.QueueFull, "queue_full")
		counter(d.dropped, es.Failed, "failed")
		gauge(d.queued, float64(es.Queued))
	}
}

func stateOf(s probe.State) probe.State {
	if s == "" {
		return "unknown"
	}
	return s
}

// Handler serves the collector's metrics, with the Go runtime's and the
// process's (go_*, process_*), in Prometheus' text format (or OpenMetrics,
// as the scraper asks).
func Handler(c *Collector) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true})
}
