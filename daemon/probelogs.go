package daemon

import (
	"strconv"
	"sync"
	"time"

	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
)

// ProbeLogs are the log layouts (rpn.LogLayouts) of the probes whose
// records a command prints, by what a record names of its probe: target,
// module, minor, kind and location. Probes a record cannot tell apart
// (one minor, kind and location) pool their layouts: a record's data is
// then cut only when one reading fits.
type ProbeLogs struct {
	mu      sync.Mutex
	m       map[string]probeLog
	refresh func() []TargetProbe // the daemon's probes now; nil for run's
	last    time.Time
}

// NewProbeLogs is a ProbeLogs that asks the daemon at socket for its
// probes when a record's probe is not known (log, the OTLP forwarder);
// "" for none (run, which adds its module).
func NewProbeLogs(socket string) *ProbeLogs {
	ls := &ProbeLogs{m: map[string]probeLog{}}
	if socket != "" {
		c := NewClient(socket)
		// a daemon that does not answer (shutting down, waiting for its
		// exporters) costs a record its format, never a wait
		c.hc.Timeout = 2 * time.Second
		ls.refresh = func() []TargetProbe {
			ps, _ := c.Probes("")
			return ps
		}
	}
	return ls
}

// probeLog is what a reader needs of a probe to show its records.
type probeLog struct {
	layouts []rpn.Layout
	format  string // "" when none, or when probes of one key differ
	formats int    // probes of the key with a format
	n       int    // probes of the key
}

func (pl probeLog) add(ls []rpn.Layout, format string) probeLog {
	pl.layouts = append(pl.layouts, ls...)
	pl.n++
	if format != "" {
		pl.formats++
		if pl.formats == 1 {
			pl.format = format
		} else if pl.format != format {
			pl.format = ""
		}
	}
	if pl.formats != pl.n {
		pl.format = ""
	}
	return pl
}

func layoutKey(target, module string, minor uint16, kind, location string) string {
	return target + "\x00" + module + "\x00" + strconv.Itoa(int(minor)) + "\x00" + kind + "\x00" + location
}

// AddModule adds a module's probes (run's).
func (ls *ProbeLogs) AddModule(target string, m *rpn.Module) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.m == nil {
		ls.m = map[string]probeLog{}
	}
	for i := range m.Probes {
		d := &m.Probes[i]
		k := layoutKey(target, m.Name, d.Minor, probe.KindName(d), d.Loc.Text)
		ls.m[k] = ls.m[k].add(rpn.LogLayouts(m, i), d.Format)
	}
}

func (ls *ProbeLogs) addProbes(ps []TargetProbe) {
	for _, p := range ps {
		l, err := rpn.ParseLayouts(p.Log)
		if err != nil {
			continue
		}
		k := layoutKey(p.Target, p.Module, p.Minor, p.Kind, p.Location)
		ls.m[k] = ls.m[k].add(l, p.Format)
	}
}

// Of are the layouts and the format for a record's probe; a probe not known yet makes
// the daemon's probes be asked again, at most once a second.
func (ls *ProbeLogs) Of(l *LogLine) ([]rpn.Layout, string) {
	if ls == nil {
		return nil, ""
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	k := layoutKey(l.Target, l.Module, l.Minor, l.Probe, l.Location)
	got, ok := ls.m[k]
	if !ok && ls.refresh != nil && time.Since(ls.last) > time.Second {
		ls.last = time.Now()
		ls.m = map[string]probeLog{}
		ls.addProbes(ls.refresh())
		got = ls.m[k]
	}
	return got.layouts, got.format
}
