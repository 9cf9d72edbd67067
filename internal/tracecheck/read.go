package tracecheck

import (
	"encoding/hex"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/internal/babeltrace"
	"github.com/gprobes/gprobes/perfetto"
	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/timeline"
)

// ReadCTF reads a CTF trace back with babeltrace2 into the records it
// holds, each with its place on its thread, and the losses: for checks
// of what a trace of a real run says. Events come in babeltrace2's order
// (by time).
func ReadCTF(t testing.TB, dir string) ([]timeline.Event, []timeline.Loss) {
	t.Helper()
	got, _ := babeltrace.Read(t, dir)
	var evs []timeline.Event
	var losses []timeline.Loss
	for _, e := range got {
		f := e.Fields
		if e.Name == "gprobes:lost" {
			losses = append(losses, timeline.Loss{Time: time.Unix(0, int64(e.Timestamp)), Target: opt(f, "target"), Module: opt(f, "module"),
				Minor: int(signed(t, f["minor"])), Location: opt(f, "location"), Records: num(t, f["records"]), Why: str(f["why"])})
			continue
		}
		r := &timeline.Record{Target: str(e.Packet["target"]), Record: probe.Record{Time: time.Unix(0, int64(e.Timestamp)),
			Module: str(f["module"]), Major: uint16(num(t, f["major"])), Minor: uint16(num(t, f["minor"])), Location: str(f["location"]),
			Probe: opt(f, "probe"), Address: num(t, f["address"]),
			Pid: int(signed(t, e.Context["pid"])), Tid: int(signed(t, e.Context["tid"])), CPU: int(signed(t, e.Context["cpu"]))}}
		typ := timeline.Instant
		switch e.Name {
		case "gprobes:exception":
			r.Kind, r.Exception, r.PC, r.Line = "exception", str(f["exception"]), uint32(num(t, f["pc"])), opt(f, "line")
		default:
			switch e.Name {
			case "gprobes:entry":
				typ = timeline.Begin
			case "gprobes:return":
				typ = timeline.End
			}
			r.Kind, r.Exit, r.Truncated = probe.RecordKind(str(f["kind"])), uint8(num(t, f["exit"])), num(t, f["truncated"]) != 0
			r.Dump, r.Debugger = opt(f, "dump"), opt(f, "debugger")
			var err error
			if r.Stacks, err = probe.ParseStacksText(opt(f, "stacks")); err != nil {
				t.Fatal(err)
			}
			data, _ := f["data"].([]any)
			r.Data = []byte{}
			for _, b := range data {
				r.Data = append(r.Data, byte(num(t, b)))
			}
		}
		evs = append(evs, timeline.Event{Type: typ, Record: r})
	}
	return evs, losses
}

// ReadPerfetto decodes a Perfetto trace into the records it holds, each
// with its place on its thread, and the losses, and checks that Perfetto's
// own schema reads the same (PerfettoSchema). Events come in the file's
// order.
func ReadPerfetto(t testing.TB, path string) ([]timeline.Event, []timeline.Loss) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	packets, err := perfetto.Read(b)
	if err != nil {
		t.Fatal(err)
	}
	events, _, err := perfetto.Resolve(packets)
	if err != nil {
		t.Fatal(err)
	}
	var evs []timeline.Event
	var losses []timeline.Loss
	for _, e := range events {
		a := e.Annotations
		switch e.Track.UUID {
		case perfetto.TrackLost:
			continue
		case perfetto.TrackGprobes:
			losses = append(losses, timeline.Loss{Time: time.Unix(0, int64(e.Timestamp)), Target: a["target"].String, Module: a["module"].String,
				Minor: int(int64(a["minor"].Uint)), Location: a["location"].String, Records: a["records"].Uint, Why: a["why"].String})
			continue
		}
		typ, p := timeline.Instant, ""
		switch e.Type {
		case perfetto.TypeSliceBegin:
			typ = timeline.Begin
		case perfetto.TypeSliceEnd:
			typ, p = timeline.End, "return."
		}
		r := &timeline.Record{Target: a[p+"target"].String, Record: probe.Record{Time: time.Unix(0, int64(e.Timestamp)),
			Module: a[p+"module"].String, Major: uint16(a[p+"major"].Uint), Minor: uint16(a[p+"minor"].Uint), Location: a[p+"location"].String,
			Probe: a[p+"probe"].String, Address: a[p+"address"].Uint, CPU: int(int64(a[p+"cpu"].Uint))}}
		if tr := e.Track.Thread; tr != nil {
			r.Pid, r.Tid = int(tr.Pid), int(tr.Tid)
		} else {
			name := strings.Fields(e.Track.Name) // "pid P tid T"
			if len(name) == 4 {
				r.Pid, r.Tid = atoi(name[1]), atoi(name[3])
			}
		}
		if len(e.Categories) == 1 {
			r.Kind = probe.RecordKind(e.Categories[0])
		}
		if r.Kind == probe.RecordException {
			r.Exception, r.PC, r.Line = a[p+"exception"].String, uint32(a[p+"pc"].Uint), a[p+"line"].String
		} else {
			r.Exit, r.Truncated = uint8(a[p+"exit"].Uint), a[p+"truncated"].Uint != 0
			r.Dump, r.Debugger = a[p+"dump"].String, a[p+"debugger"].String
			// the stacks: annotations ustack, kstack, ustack.2 ... in order
			for _, name := range e.Order {
				n := strings.TrimPrefix(name, p)
				if n == name && p != "" || !strings.HasPrefix(n, "ustack") && !strings.HasPrefix(n, "kstack") {
					continue
				}
				kind := "user"
				if strings.HasPrefix(n, "kstack") {
					kind = "kernel"
				}
				st, err := probe.ParseStackText(kind, a[name].String)
				if err != nil {
					t.Fatal(err)
				}
				r.Stacks = append(r.Stacks, st)
			}
			r.Data, _ = hex.DecodeString(a[p+"data"].String)
			if r.Data == nil {
				r.Data = []byte{}
			}
		}
		evs = append(evs, timeline.Event{Type: typ, Record: r})
	}
	// what package perfetto's reader read is what Perfetto's own schema
	// reads, field by field (the reader shares the writer's numbers)
	PerfettoSchema(t, path, evs, losses)
	return evs, losses
}

func atoi(s string) int {
	n := 0
	neg := strings.HasPrefix(s, "-")
	for _, c := range strings.TrimPrefix(s, "-") {
		n = n*10 + int(c-'0')
	}
	if neg {
		return -n
	}
	return n
}

// ByThread groups events by thread, in order, the threads in order of
// their first event.
func ByThread(evs []timeline.Event) ([]timeline.Thread, map[timeline.Thread][]timeline.Event) {
	return byThread(evs)
}

// Same checks that got (read back from a trace) holds the events of want,
// thread by thread, every field of every record equal.
func Same(t testing.TB, what string, got, want []timeline.Event) {
	t.Helper()
	order, wantBy := byThread(want)
	_, gotBy := byThread(got)
	if len(gotBy) != len(wantBy) {
		t.Errorf("%s: %d threads, want %d", what, len(gotBy), len(wantBy))
	}
	norm := func(e timeline.Event) timeline.Event {
		r := *e.Record
		r.Time = time.Unix(0, int64(timeline.Nanos(r.Time)))
		if len(r.Data) == 0 {
			r.Data = nil
		}
		return timeline.Event{Type: e.Type, Record: &r}
	}
	for _, k := range order {
		g, w := gotBy[k], wantBy[k]
		if len(g) != len(w) {
			t.Errorf("%s: thread %+v: %d events, want %d", what, k, len(g), len(w))
			continue
		}
		for i := range w {
			a, b := norm(g[i]), norm(w[i])
			if a.Type != b.Type || !reflect.DeepEqual(*a.Record, *b.Record) {
				t.Errorf("%s: thread %+v event %d:\n got %v %+v\nwant %v %+v", what, k, i, a.Type, *a.Record, b.Type, *b.Record)
				return
			}
		}
	}
}
