// Package tracecheck checks a trace gprobes wrote against the events it
// should hold, for tests: a CTF trace as babeltrace2 reads it back, a
// Perfetto trace decoded field by field. The expected events are each
// thread's records in order with their place (instant, begin, end of a
// slice); the check compares every field of every record, each thread's
// order, the counts, and the lost-record counts.
//
// The trap: threads are compared one by one, not the order between them:
// babeltrace2 merges streams by time, ties in its own order.
package tracecheck

import (
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/gprobes/gprobes/internal/babeltrace"
	"github.com/gprobes/gprobes/perfetto"
	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/timeline"
)

// byThread groups events by thread, in order, with the threads in order of
// their first event.
func byThread(evs []timeline.Event) ([]timeline.Thread, map[timeline.Thread][]timeline.Event) {
	m := map[timeline.Thread][]timeline.Event{}
	var order []timeline.Thread
	for _, e := range evs {
		k := e.Thread()
		if _, ok := m[k]; !ok {
			order = append(order, k)
		}
		m[k] = append(m[k], e)
	}
	return order, m
}

// CTF reads the trace in dir with babeltrace2 and checks it holds exactly
// want (and the losses).
func CTF(t testing.TB, dir string, want []timeline.Event, losses []timeline.Loss) {
	t.Helper()
	got, disc := babeltrace.Read(t, dir)
	var lost []babeltrace.Event
	gotBy := map[timeline.Thread][]babeltrace.Event{}
	for _, e := range got {
		if e.Name == "gprobes:lost" {
			lost = append(lost, e)
			continue
		}
		k := timeline.Thread{Target: str(e.Packet["target"]), Pid: int(num(t, e.Context["pid"])), Tid: int(num(t, e.Context["tid"]))}
		gotBy[k] = append(gotBy[k], e)
	}
	order, wantBy := byThread(want)
	if len(gotBy) != len(wantBy) {
		t.Errorf("CTF: %d threads, want %d", len(gotBy), len(wantBy))
	}
	for _, k := range order {
		g, w := gotBy[k], wantBy[k]
		if len(g) != len(w) {
			t.Errorf("CTF: thread %+v: %d events, want %d", k, len(g), len(w))
			continue
		}
		for i := range w {
			if err := ctfEvent(g[i], w[i]); err != nil {
				t.Errorf("CTF: thread %+v event %d: %v\n got %+v\nwant %+v", k, i, err, g[i], *w[i].Record)
				return
			}
		}
	}
	if len(lost) != len(losses) {
		t.Fatalf("CTF: %d gprobes:lost events, want %d", len(lost), len(losses))
	}
	var total uint64
	for i, l := range losses {
		f := lost[i].Fields
		if opt(f, "target") != l.Target || opt(f, "module") != l.Module || signed(t, f["minor"]) != int64(l.Minor) ||
			opt(f, "location") != l.Location || num(t, f["records"]) != l.Records || str(f["why"]) != l.Why {
			t.Errorf("CTF: gprobes:lost %d: %+v, want %+v", i, f, l)
		}
		total += l.Records
	}
	var reported uint64
	for _, d := range disc {
		reported += d.Count
	}
	if reported != total {
		t.Errorf("CTF: babeltrace2 reports %d discarded events, want %d", reported, total)
	}
}

// opt is an optional string: a sequence of none or one string after
// has_NAME ("" for none), as the writer encodes strings that may be empty.
func opt(f map[string]any, name string) string {
	a, ok := f[name].([]any)
	has, _ := f["has_"+name].(babeltrace.Bare)
	if !ok || len(a) == 0 {
		if has != "0" {
			return "\x00has_" + name + " " + string(has) + " with no value"
		}
		return ""
	}
	s, _ := a[0].(string)
	if len(a) != 1 || has != "1" || s == "" {
		return fmt.Sprintf("\x00bad %s: %v (has_%s %s)", name, a, name, has)
	}
	return s
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func num(t testing.TB, v any) uint64 {
	t.Helper()
	b, ok := v.(babeltrace.Bare)
	if !ok {
		t.Fatalf("%v is not a number", v)
	}
	n, err := b.Uint()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func signed(t testing.TB, v any) int64 {
	t.Helper()
	b, ok := v.(babeltrace.Bare)
	if !ok {
		t.Fatalf("%v is not a number", v)
	}
	n, err := b.Int()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// ctfEvent compares one event babeltrace2 read with the record it should be.
func ctfEvent(g babeltrace.Event, w timeline.Event) error {
	r := w.Record
	name := "gprobes:" + string(r.Kind)
	switch {
	case r.Kind == probe.RecordException:
	case w.Type == timeline.Begin:
		name = "gprobes:entry"
	case w.Type == timeline.End:
		name = "gprobes:return"
	}
	if g.Name != name {
		return fmt.Errorf("name %s, want %s", g.Name, name)
	}
	if g.Timestamp != timeline.Nanos(r.Time) {
		return fmt.Errorf("timestamp %d, want %d", g.Timestamp, timeline.Nanos(r.Time))
	}
	want := map[string]string{"module": r.Module, "location": r.Location}
	opts := map[string]string{"probe": r.Probe}
	nums := map[string]uint64{"major": uint64(r.Major), "minor": uint64(r.Minor), "address": r.Address}
	if r.Kind == probe.RecordException {
		want["exception"], opts["line"] = r.Exception, r.Line
		nums["pc"] = uint64(r.PC)
	} else {
		want["kind"], opts["dump"], opts["debugger"], opts["stacks"] = string(r.Kind), r.Dump, r.Debugger, probe.StacksText(r.Stacks)
		nums["exit"], nums["data_len"] = uint64(r.Exit), uint64(len(r.Data))
		nums["truncated"] = 0
		if r.Truncated {
			nums["truncated"] = 1
		}
		data, ok := g.Fields["data"].([]any)
		if !ok || len(data) != len(r.Data) {
			return fmt.Errorf("data %v, want %x", g.Fields["data"], r.Data)
		}
		for i, b := range data {
			v, err := b.(babeltrace.Bare).Uint()
			if err != nil || v != uint64(r.Data[i]) {
				return fmt.Errorf("data[%d] %v, want %#x", i, b, r.Data[i])
			}
		}
	}
	for k, v := range want {
		if s, ok := g.Fields[k].(string); !ok || s != v {
			return fmt.Errorf("%s %v, want %q", k, g.Fields[k], v)
		}
	}
	for k, v := range opts {
		if s := opt(g.Fields, k); s != v {
			return fmt.Errorf("%s %q, want %q", k, s, v)
		}
	}
	for k, v := range nums {
		b, ok := g.Fields[k].(babeltrace.Bare)
		if !ok {
			return fmt.Errorf("%s %v, want %d", k, g.Fields[k], v)
		}
		if n, err := b.Uint(); err != nil || n != v {
			return fmt.Errorf("%s %v, want %d", k, b, v)
		}
	}
	ctx := map[string]int{"pid": r.Pid, "tid": r.Tid, "cpu": r.CPU}
	for k, v := range ctx {
		b, ok := g.Context[k].(babeltrace.Bare)
		if !ok {
			return fmt.Errorf("context %s missing", k)
		}
		if n, err := b.Int(); err != nil || n != int64(v) {
			return fmt.Errorf("context %s %v, want %d", k, b, v)
		}
	}
	if str(g.Packet["target"]) != r.Target {
		return fmt.Errorf("target %v, want %q", g.Packet["target"], r.Target)
	}
	return nil
}

// Perfetto decodes the trace at path and checks it holds exactly want
// (and the losses): the sequences and their incremental state, the track
// descriptors, every event's type, track, timestamp, name, category and
// debug annotations; first with package perfetto's reader, then with
// Perfetto's own schema (PerfettoSchema), which shares no field number
// with the writer.
func Perfetto(t testing.TB, path string, want []timeline.Event, losses []timeline.Loss) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	packets, err := perfetto.Read(b)
	if err != nil {
		t.Fatalf("Perfetto: %v", err)
	}
	events, tracks, err := perfetto.Resolve(packets)
	if err != nil {
		t.Fatalf("Perfetto: %v", err)
	}
	// every sequence starts with a packet that clears its state and says
	// it is the first; every packet that interns or uses interned names
	// says it needs the state
	seen := map[uint32]bool{}
	for i, p := range packets {
		if !seen[p.Sequence] {
			seen[p.Sequence] = true
			if p.Flags&perfetto.SeqIncrementalStateCleared == 0 || !p.FirstOnSequence {
				t.Errorf("Perfetto: packet %d, the first of sequence %d: flags %d, first_packet_on_sequence %v", i, p.Sequence, p.Flags, p.FirstOnSequence)
			}
		}
		if p.Interned != nil && p.Flags&perfetto.SeqNeedsIncrementalState == 0 {
			t.Errorf("Perfetto: packet %d interns without SEQ_NEEDS_INCREMENTAL_STATE", i)
		}
	}
	// the thread tracks: each on a sequence of its own
	trackOf := map[timeline.Thread]uint64{}
	seqOf := map[uint64]uint32{}
	gotBy := map[uint64][]perfetto.Event{}
	var lostEvents, counters []perfetto.Event
	for _, e := range events {
		switch e.Track.UUID {
		case perfetto.TrackGprobes:
			lostEvents = append(lostEvents, e)
			continue
		case perfetto.TrackLost:
			counters = append(counters, e)
			continue
		}
		if e.Sequence == perfetto.SeqGprobes {
			t.Errorf("Perfetto: a record's event on gprobes' sequence")
		}
		if s, ok := seqOf[e.Track.UUID]; ok && s != e.Sequence {
			t.Errorf("Perfetto: track %d on sequences %d and %d", e.Track.UUID, s, e.Sequence)
		}
		seqOf[e.Track.UUID] = e.Sequence
		gotBy[e.Track.UUID] = append(gotBy[e.Track.UUID], e)
	}
	order, wantBy := byThread(want)
	for _, k := range order {
		uuid, err := findTrack(tracks, k)
		if err != nil {
			t.Errorf("Perfetto: %v", err)
			continue
		}
		trackOf[k] = uuid
		g, w := gotBy[uuid], wantBy[k]
		if len(g) != len(w) {
			t.Errorf("Perfetto: thread %+v: %d events, want %d", k, len(g), len(w))
			continue
		}
		for i := range w {
			if err := perfettoEvent(g[i], w[i]); err != nil {
				t.Errorf("Perfetto: thread %+v event %d: %v\n got %+v\nwant %+v", k, i, err, g[i], *w[i].Record)
				return
			}
		}
	}
	if len(gotBy) != len(wantBy) {
		t.Errorf("Perfetto: %d tracks with events, want %d", len(gotBy), len(wantBy))
	}
	// gprobes' own: the counter from 0 to the total, an instant a loss
	if tr := tracks[perfetto.TrackLost]; tr == nil || !tr.Counter || tr.CounterUnit != perfetto.UnitCount || tr.Parent != perfetto.TrackGprobes {
		t.Errorf("Perfetto: the lost-records counter track: %+v", tr)
	}
	if tr := tracks[perfetto.TrackGprobes]; tr == nil || tr.Name != "gprobes" {
		t.Errorf("Perfetto: the gprobes track: %+v", tr)
	}
	if len(lostEvents) != len(losses) || len(counters) != len(losses)+1 {
		t.Fatalf("Perfetto: %d lost events and %d counter values, want %d and %d", len(lostEvents), len(counters), len(losses), len(losses)+1)
	}
	var total uint64
	if counters[0].Counter != 0 {
		t.Errorf("Perfetto: the counter starts at %d", counters[0].Counter)
	}
	for i, l := range losses {
		total += l.Records
		e := lostEvents[i]
		a := e.Annotations
		if e.Type != perfetto.TypeInstant || e.Name != "records lost" || a["target"].String != l.Target || a["module"].String != l.Module ||
			int64(a["minor"].Uint) != int64(l.Minor) || a["location"].String != l.Location || a["records"].Uint != l.Records || a["why"].String != l.Why {
			t.Errorf("Perfetto: loss %d: %+v, want %+v", i, e, l)
		}
		if c := counters[i+1]; c.Type != perfetto.TypeCounter || c.Counter != int64(total) || c.Timestamp != e.Timestamp {
			t.Errorf("Perfetto: counter %d: %+v, want %d at %d", i+1, c, total, e.Timestamp)
		}
	}
	// and the same, read with Perfetto's own schema
	PerfettoSchema(t, path, want, losses)
}

// findTrack finds the thread's track: a thread descriptor under its
// process's track for a process, a track "pid P tid T" under the target's
// otherwise.
func findTrack(tracks map[uint64]*perfetto.Track, k timeline.Thread) (uint64, error) {
	var found []uint64
	for uuid, tr := range tracks {
		parent := tracks[tr.Parent]
		if parent == nil {
			continue
		}
		if timeline.Process(k.Target) {
			if tr.Thread != nil && int(tr.Thread.Pid) == k.Pid && int(tr.Thread.Tid) == k.Tid && parent.Process != nil && int(parent.Process.Pid) == k.Pid {
				found = append(found, uuid)
			}
		} else if tr.Name == fmt.Sprintf("pid %d tid %d", k.Pid, k.Tid) && parent.Name == k.Target && parent.Process == nil {
			found = append(found, uuid)
		}
	}
	if len(found) != 1 {
		return 0, fmt.Errorf("thread %+v: tracks %v, want one", k, found)
	}
	return found[0], nil
}

func perfettoEvent(g perfetto.Event, w timeline.Event) error {
	r := w.Record
	typ := map[timeline.EventType]uint64{timeline.Instant: perfetto.TypeInstant, timeline.Begin: perfetto.TypeSliceBegin, timeline.End: perfetto.TypeSliceEnd}[w.Type]
	if g.Type != typ {
		return fmt.Errorf("type %d, want %d", g.Type, typ)
	}
	if g.Timestamp != timeline.Nanos(r.Time) {
		return fmt.Errorf("timestamp %d, want %d", g.Timestamp, timeline.Nanos(r.Time))
	}
	name := r.Location
	switch {
	case r.Kind == probe.RecordException:
		name = "exception " + r.Exception
	case w.Type == timeline.End:
		name = ""
	case r.Probe != "" && w.Type == timeline.Instant:
		name = r.Probe + " " + r.Location
	}
	if g.Name != name {
		return fmt.Errorf("name %q, want %q", g.Name, name)
	}
	if !slices.Equal(g.Categories, []string{string(r.Kind)}) {
		return fmt.Errorf("categories %q, want [%s]", g.Categories, r.Kind)
	}
	p := ""
	if w.Type == timeline.End {
		p = "return."
	}
	type av struct {
		kind string
		u    uint64
		s    string
	}
	want := map[string]av{
		"target": {"string", 0, r.Target}, "module": {"string", 0, r.Module}, "major": {"uint", uint64(r.Major), ""},
		"minor": {"uint", uint64(r.Minor), ""}, "location": {"string", 0, r.Location}, "address": {"pointer", r.Address, ""},
		"cpu": {"int", uint64(int64(r.CPU)), ""},
	}
	if r.Probe != "" {
		want["probe"] = av{"string", 0, r.Probe}
	}
	if r.Kind == probe.RecordException {
		want["exception"], want["pc"], want["line"] = av{"string", 0, r.Exception}, av{"uint", uint64(r.PC), ""}, av{"string", 0, r.Line}
	} else {
		want["exit"], want["data"] = av{"uint", uint64(r.Exit), ""}, av{"string", 0, hex.EncodeToString(r.Data)}
		if r.Truncated {
			want["truncated"] = av{"bool", 1, ""}
		}
		if r.Dump != "" {
			want["dump"] = av{"string", 0, r.Dump}
		}
		if r.Debugger != "" {
			want["debugger"] = av{"string", 0, r.Debugger}
		}
		for i, st := range r.Stacks {
			want[probe.StackName(r.Stacks, i)] = av{"string", 0, st.Text()}
		}
	}
	if len(g.Annotations) != len(want) {
		return fmt.Errorf("annotations %v, want %v", g.Order, want)
	}
	for k, v := range want {
		a, ok := g.Annotations[p+k]
		if !ok || a.Kind != v.kind || a.Uint != v.u || a.String != v.s {
			return fmt.Errorf("annotation %s%s %+v, want %+v", p, k, a, v)
		}
	}
	return nil
}

// Tee is a timeline.Writer that keeps a copy of what it passes on to W:
// the events a trace should hold.
type Tee struct {
	W      timeline.Writer
	Events []timeline.Event
	Losses []timeline.Loss
}

func (w *Tee) Event(ev timeline.Event) { w.Events = append(w.Events, ev); w.W.Event(ev) }
func (w *Tee) Loss(l timeline.Loss)    { w.Losses = append(w.Losses, l); w.W.Loss(l) }
func (w *Tee) Close() error            { return w.W.Close() }
