package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gprobes/gprobes/ctf"
	"github.com/gprobes/gprobes/daemon"
	"github.com/gprobes/gprobes/hist"
	"github.com/gprobes/gprobes/perfetto"
	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/timeline"
)

// signalContext ends at SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}

var timeNow = time.Now

// formatFlag is --format, for log and run.
func formatFlag() cli.Flag {
	return &cli.StringFlag{Name: "format", Usage: "write the records to -o OUT as a trace: `FORMAT` ctf (a CTF 1.8 directory: babeltrace2, Trace Compass) or perfetto (a Perfetto protobuf file: ui.perfetto.dev, trace_processor); docs/records.md"}
}

// logModes runs gprobes log's --format and --hist, after checking the
// flags; without them (nil) log prints the records.
func logModes(c *cli.Context) error {
	format, out := c.String("format"), c.String("output")
	n := -1
	if h := c.String("hist"); h != "" {
		v, err := strconv.Atoi(h)
		if err != nil || v < 0 || v > 1<<20 {
			return cli.Exit(fmt.Sprintf("log: --hist %q: the index of a logged word, 0 for the first", h), 2)
		}
		n = v
	}
	switch {
	case format == "" && n < 0:
		if out != "" {
			return cli.Exit("log: -o writes a trace: give --format ctf or perfetto", 2)
		}
		return nil
	case format != "" && n >= 0:
		return cli.Exit("log: --format or --hist, not both", 2)
	case format != "":
		if format != "ctf" && format != "perfetto" {
			return cli.Exit(fmt.Sprintf("log: --format %q: ctf or perfetto", format), 2)
		}
		if out == "" {
			return cli.Exit("log: --format writes a trace: give -o OUT", 2)
		}
		if c.Bool("follow") {
			return logTimelineFollow(c, format, out)
		}
		return logTimeline(c, format, out)
	case out != "":
		return cli.Exit("log: -o goes with --format; --hist prints on standard output", 2)
	}
	return logHist(c, n)
}

// openTimeline creates the trace writer of a --format.
func openTimeline(format, out string, opts timeline.Options) (timeline.Writer, error) {
	switch format {
	case "ctf":
		return ctf.Create(out, opts)
	case "perfetto":
		return perfetto.Create(out, opts)
	}
	return nil, fmt.Errorf("--format %q: ctf or perfetto", format)
}

// recordOf converts a line of the daemon's log back into a record.
func recordOf(l *daemon.LogLine) (*timeline.Record, error) {
	data, err := hex.DecodeString(l.Data)
	if err != nil {
		return nil, fmt.Errorf("a record's data %q: %v", l.Data, err)
	}
	addr, err := strconv.ParseUint(strings.TrimPrefix(l.Address, "0x"), 16, 64)
	if err != nil && l.Address != "" {
		return nil, fmt.Errorf("a record's address %q: %v", l.Address, err)
	}
	return &timeline.Record{Target: l.Target, Record: probe.Record{Time: l.Time, Kind: probe.RecordKind(l.Kind), Module: l.Module, Major: l.Major,
		Minor: l.Minor, Location: l.Location, Probe: l.Probe, Address: addr, Pid: l.Pid, Tid: l.Tid, CPU: l.CPU, Exit: l.Exit,
		Data: data, Truncated: l.Truncated, Exception: l.Exception, PC: l.PC, Line: l.Line, Dump: l.Dump, Debugger: l.Debugger, Stacks: l.Stacks}}, nil
}

// lossesOf turns the log's "lost" line into the trace's counts.
func lossesOf(l *daemon.LostLine) []timeline.Loss {
	var out []timeline.Loss
	if l.Lost.Records > 0 {
		out = append(out, timeline.Loss{Time: l.Time, Minor: -1, Records: l.Lost.Records,
			Why: "not written to the daemon's log file: " + l.Lost.String()})
	}
	if l.InTargets > 0 {
		out = append(out, timeline.Loss{Time: l.Time, Minor: -1, Records: l.InTargets,
			Why: "lost in the processes probed: their jump pads' rings were full"})
	}
	if l.RotatedAway > 0 {
		out = append(out, timeline.Loss{Time: l.Time, Minor: -1,
			Why: fmt.Sprintf("%d rotated log files were deleted before they could be read (records written, not read)", l.RotatedAway)})
	}
	for _, why := range awayOf(l) { // written, not read: no count of lost records
		out = append(out, timeline.Loss{Time: l.Time, Minor: -1, Why: why})
	}
	return out
}

// logTimeline writes the daemon's log as a trace. The log is read twice,
// from a copy: first for the functions that have return records (their
// entries open slices), then for the trace.
func logTimeline(c *cli.Context, format, out string) error {
	ctx, cancel := signalContext()
	defer cancel()
	spool, err := os.CreateTemp("", "gprobes-log-*.jsonl")
	if err != nil {
		return cli.Exit("log: "+err.Error(), 1)
	}
	os.Remove(spool.Name())
	defer spool.Close()
	bw := bufio.NewWriterSize(spool, 256<<10)
	returns := map[[2]string]bool{}
	var losses []timeline.Loss
	var buf []byte
	n := 0
	keep := logFilter(c)
	err = client(c).Log(ctx, false, func(l *daemon.LogLine) error {
		if !keep(l) {
			return nil
		}
		if l.Probe == "retprobe" && l.Kind != "exception" {
			returns[[2]string{l.Module, l.Location}] = true
		}
		n++
		buf = append(l.AppendJSON(buf[:0]), '\n')
		_, err := bw.Write(buf)
		return err
	}, func(l *daemon.LostLine) error {
		losses = append(losses, lossesOf(l)...)
		printLosses(c.App.ErrWriter, "log", l.Lost, l.SyslogLost)
		printAway(c.App.ErrWriter, l)
		return nil
	})
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return cli.Exit("log: "+err.Error(), 1)
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return cli.Exit("log: "+err.Error(), 1)
	}
	var lost daemon.Losses
	w, err := openTimeline(format, out, timeline.Options{OnLost: func(r *timeline.Record, err error) { lost.Add(r.Target, r.Module, r.Minor, err) }})
	if err != nil {
		return cli.Exit("log: "+err.Error(), 1)
	}
	b := timeline.NewBuilder(w)
	for k := range returns {
		b.Returns(k[0], k[1])
	}
	sc := bufio.NewScanner(spool)
	sc.Buffer(nil, 1<<30)
	for sc.Scan() {
		var l daemon.LogLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return cli.Exit("log: "+err.Error(), 1)
		}
		r, err := recordOf(&l)
		if err != nil {
			return cli.Exit("log: "+err.Error(), 1)
		}
		b.Add(r)
	}
	if err := sc.Err(); err != nil {
		return cli.Exit("log: "+err.Error(), 1)
	}
	b.Flush()
	for _, l := range losses {
		b.Loss(l)
	}
	if err := w.Close(); err != nil {
		return cli.Exit(fmt.Sprintf("log: %s: %v", out, err), 1)
	}
	records, slices, late := b.Stats()
	if late > 0 {
		fmt.Fprintf(c.App.ErrWriter, "gprobes: log: %d records came more than %v after later ones of their thread: placed after them\n", late, b.Window)
	}
	if s := lost.Summary(); s.Records > 0 {
		return cli.Exit(fmt.Sprintf("log: %d of %d records could not be written to %s: %s", s.Records, records, out, s), exitLost)
	}
	fmt.Fprintf(c.App.ErrWriter, "gprobes: log: %s: %s, %s (%s format)\n", out, plural(int(records), "record"), plural(int(slices), "slice"), format)
	return nil
}

// followTick is how often log --follow --format releases what the
// builder holds and writes it out.
var followTick = time.Second

// logTimelineFollow writes the records committed from now on as a trace,
// until SIGINT or SIGTERM. Which functions have return probes is asked of
// the daemon (query) at the start and again at the first record of a
// module it did not list then (inserted since). Every followTick the
// records older than the builder's window go to the writer and the writer
// writes its buffers out whole, so that the trace is readable up to that
// point if gprobes is killed; the lost counts and the end (Perfetto's
// clock snapshot, CTF's loss stream) come at the signal.
func logTimelineFollow(c *cli.Context, format, out string) error {
	ctx, cancel := signalContext()
	defer cancel()
	cl := client(c)
	var lost daemon.Losses
	w, err := openTimeline(format, out, timeline.Options{OnLost: func(r *timeline.Record, err error) { lost.Add(r.Target, r.Module, r.Minor, err) }})
	if err != nil {
		return cli.Exit("log: "+err.Error(), 1)
	}
	b := timeline.NewBuilder(w)
	known := map[string]bool{}
	learn := func() error {
		probes, err := cl.Probes("")
		if err != nil {
			return err
		}
		for _, p := range probes {
			known[p.Module] = true
			if p.Kind == "retprobe" {
				b.Returns(p.Module, p.Location)
			}
		}
		return nil
	}
	if err := learn(); err != nil {
		w.Close()
		return cli.Exit("log: "+err.Error(), 1)
	}
	var mu sync.Mutex
	var lastAdd time.Time // when the last record came (under mu)
	done := make(chan struct{})
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		t := time.NewTicker(followTick)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			mu.Lock()
			// a quiet stream only: while records come, the builder
			// releases by their own time as they are added, and a
			// stream that lags behind the clock (a loaded daemon) would
			// have its records taken for late ones
			if timeNow().Sub(lastAdd) >= followTick {
				b.Tick(timeNow())
			}
			if f, ok := w.(timeline.Flusher); ok {
				f.Flush()
			}
			mu.Unlock()
		}
	}()
	fmt.Fprintf(c.App.ErrWriter, "gprobes: log: writing the records committed from now on to %s (%s format); Ctrl-C ends it\n", out, format)
	var losses []timeline.Loss
	keep := logFilter(c)
	err = cl.Log(ctx, true, func(l *daemon.LogLine) error {
		if !keep(l) {
			return nil
		}
		if !known[l.Module] {
			known[l.Module] = true // asked once, even if it is gone by now
			mu.Lock()              // the ticker's Tick reads what learn declares
			err := learn()
			mu.Unlock()
			if err != nil {
				return err
			}
		}
		r, err := recordOf(l)
		if err != nil {
			return err
		}
		mu.Lock()
		b.Add(r)
		lastAdd = timeNow()
		mu.Unlock()
		return nil
	}, func(l *daemon.LostLine) error {
		losses = append(losses, lossesOf(l)...)
		printLosses(c.App.ErrWriter, "log", l.Lost, l.SyslogLost)
		printAway(c.App.ErrWriter, l)
		return nil
	})
	close(done)
	<-ticked
	b.Flush()
	for _, l := range losses {
		b.Loss(l)
	}
	cerr := w.Close()
	records, slices, late := b.Stats()
	if err != nil {
		return cli.Exit(fmt.Sprintf("log: %v (%s written to %s)", err, plural(int(records), "record"), out), 1)
	}
	if cerr != nil {
		return cli.Exit(fmt.Sprintf("log: %s: %v", out, cerr), 1)
	}
	if late > 0 {
		fmt.Fprintf(c.App.ErrWriter, "gprobes: log: %d records came more than %v after later ones of their thread: placed after them\n", late, b.Window)
	}
	if s := lost.Summary(); s.Records > 0 {
		return cli.Exit(fmt.Sprintf("log: %d of %d records could not be written to %s: %s", s.Records, records, out, s), exitLost)
	}
	fmt.Fprintf(c.App.ErrWriter, "gprobes: log: %s: %s, %s (%s format)\n", out, plural(int(records), "record"), plural(int(slices), "slice"), format)
	return nil
}

// logHist prints a log2 histogram of word n of each probe's records: of
// the log as it stands, or with --follow of the records committed from now
// until SIGINT or SIGTERM (as bpftrace prints its maps at the end).
func logHist(c *cli.Context, n int) error {
	ctx, cancel := signalContext()
	defer cancel()
	var set hist.Set
	short := map[string]uint64{}
	keep := logFilter(c)
	err := client(c).Log(ctx, c.Bool("follow"), func(l *daemon.LogLine) error {
		if l.Kind == "exception" || !keep(l) {
			return nil
		}
		loc := l.Location
		if l.Probe != "" {
			loc = l.Probe + " " + loc
		}
		key := fmt.Sprintf("%s, %s, %d, %s", l.Target, l.Module, l.Minor, loc)
		if len(l.Data) < 16*(n+1) {
			short[key]++
			return nil
		}
		word, err := hex.DecodeString(l.Data[16*n : 16*(n+1)])
		if err != nil {
			return fmt.Errorf("a record's data %q: %v", l.Data, err)
		}
		set.Add(key, int64(binary.LittleEndian.Uint64(word)))
		return nil
	}, func(l *daemon.LostLine) error {
		printLosses(c.App.ErrWriter, "log", l.Lost, l.SyslogLost)
		printAway(c.App.ErrWriter, l)
		return nil
	})
	if err != nil {
		return cli.Exit("log: "+err.Error(), 1)
	}
	if err := set.Write(c.App.Writer); err != nil {
		return cli.Exit("log: "+err.Error(), 1)
	}
	for key, k := range short {
		fmt.Fprintf(c.App.ErrWriter, "gprobes: log: --hist %d: %s of @[%s] have no word %d (fewer than %d words logged)\n", n, plural(int(k), "record"), key, n, n+1)
	}
	return nil
}

// traceSink is gprobes run's sink with --format: the records go to a
// timeline.Builder and its writer, which buffer them and write whole
// packets, so a hit costs no more than a JSON line does.
type traceSink struct {
	mu      *sync.Mutex
	target  string // the label of the summary, set before the first insert
	b       *timeline.Builder
	w       timeline.Writer
	out     *recordOutput // lost: the records the trace could not take
	records uint64
}

func newTraceSink(format, path string, mod *rpn.Module, mu *sync.Mutex, out *recordOutput) (*traceSink, error) {
	s := &traceSink{mu: mu, out: out}
	w, err := openTimeline(format, path, timeline.Options{OnLost: func(r *timeline.Record, err error) { out.lost.Add("", r.Module, r.Minor, err) }})
	if err != nil {
		return nil, err
	}
	s.w, s.b = w, timeline.NewBuilder(w)
	for _, p := range mod.Probes {
		if p.Kind == rpn.ProbeRetprobe {
			s.b.Returns(mod.Name, p.Loc.Text)
		}
	}
	return s, nil
}

func (s *traceSink) add(r *probe.Record) {
	s.records++
	s.b.Add(&timeline.Record{Target: s.target, Record: *r})
}

func (s *traceSink) Commit(r *probe.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.add(r)
}

func (s *traceSink) CommitBatch(recs []*probe.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range recs {
		s.add(r)
	}
}

func (s *traceSink) setTarget(label string) {
	s.mu.Lock()
	s.target = label
	s.mu.Unlock()
}

// finish writes the rest of the trace once the engine is closed: the
// records still held, and the counts of records lost in the process
// (jump pads' rings) and on the way to the trace.
func (s *traceSink) finish(probes []probe.Info) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Flush()
	for _, p := range probes {
		if p.Lost > 0 {
			s.b.Loss(timeline.Loss{Time: timeNow(), Target: s.target, Module: p.Module, Minor: int(p.Minor), Location: p.Location,
				Records: p.Lost, Why: "lost in the process: its jump pads' ring was full"})
		}
		if n := s.out.lost.Of("", p.Module, p.Minor); n > 0 {
			s.b.Loss(timeline.Loss{Time: timeNow(), Target: s.target, Module: p.Module, Minor: int(p.Minor), Location: p.Location,
				Records: n, Why: "could not be written to the trace: " + s.out.lost.Summary().String()})
		}
	}
	err := s.w.Close()
	s.out.written = s.records - s.out.lost.Total()
	return err
}
