package tracecheck

import (
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/timeline"
)

// The Perfetto schema oracle: a trace is decoded with Perfetto's own
// schema (perfetto/perfetto_trace.proto, the merged trace proto that
// Perfetto's repository generates for others to copy; compiled by protoc
// into descriptors, decoded with dynamicpb) and read by the fields' names,
// not by the numbers package perfetto writes: a field number or wire type
// that is not Perfetto's is an unknown field or a wrong value here.

var schemaOnce struct {
	sync.Once
	trace protoreflect.MessageDescriptor
	err   error
}

// traceSchema is Perfetto's Trace message, compiled once per process.
func traceSchema(t testing.TB) protoreflect.MessageDescriptor {
	t.Helper()
	protoc := testkit.Tool(t, "protoc")
	schemaOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		dir := filepath.Join(filepath.Dir(file), "perfetto")
		tmp, err := os.MkdirTemp("", "perfetto-schema-")
		if err != nil {
			schemaOnce.err = err
			return
		}
		defer os.RemoveAll(tmp)
		out := filepath.Join(tmp, "trace.desc")
		cmd := exec.Command(protoc, "--include_imports", "--descriptor_set_out="+out, "-I", dir, filepath.Join(dir, "perfetto_trace.proto"))
		if b, err := cmd.CombinedOutput(); err != nil {
			schemaOnce.err = fmt.Errorf("protoc: %v\n%s", err, b)
			return
		}
		b, err := os.ReadFile(out)
		if err != nil {
			schemaOnce.err = err
			return
		}
		var set descriptorpb.FileDescriptorSet
		if err := proto.Unmarshal(b, &set); err != nil {
			schemaOnce.err = err
			return
		}
		files, err := protodesc.NewFiles(&set)
		if err != nil {
			schemaOnce.err = err
			return
		}
		d, err := files.FindDescriptorByName("perfetto.protos.Trace")
		if err != nil {
			schemaOnce.err = err
			return
		}
		schemaOnce.trace = d.(protoreflect.MessageDescriptor)
	})
	if schemaOnce.err != nil {
		t.Fatalf("Perfetto's schema: %v", schemaOnce.err)
	}
	return schemaOnce.trace
}

// unknownFields lists the places in m that the schema does not know: an
// unknown field number, a known number with another wire type, a closed
// enum's unknown value.
func unknownFields(m protoreflect.Message, path string, out []string) []string {
	if u := m.GetUnknown(); len(u) > 0 {
		out = append(out, fmt.Sprintf("%s: %d bytes of unknown fields (% x)", path, len(u), u[:min(len(u), 16)]))
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() == nil || fd.IsMap() {
			return true
		}
		p := path + "." + string(fd.Name())
		if fd.IsList() {
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				out = unknownFields(l.Get(i).Message(), fmt.Sprintf("%s[%d]", p, i), out)
			}
			return true
		}
		out = unknownFields(v.Message(), p, out)
		return true
	})
	return out
}

// msg is a message read by its fields' names.
type msg struct{ m protoreflect.Message }

func (m msg) fd(name string) protoreflect.FieldDescriptor {
	fd := m.m.Descriptor().Fields().ByName(protoreflect.Name(name))
	if fd == nil {
		panic(fmt.Sprintf("%s has no field %s", m.m.Descriptor().FullName(), name))
	}
	return fd
}

func (m msg) has(name string) bool { return m.m.Has(m.fd(name)) }
func (m msg) u(name string) uint64 { return m.m.Get(m.fd(name)).Uint() }
func (m msg) i(name string) int64  { return m.m.Get(m.fd(name)).Int() }
func (m msg) s(name string) string { return m.m.Get(m.fd(name)).String() }
func (m msg) b(name string) bool   { return m.m.Get(m.fd(name)).Bool() }
func (m msg) sub(name string) msg  { return msg{m.m.Get(m.fd(name)).Message()} }

// enum is the name of an enum field's value.
func (m msg) enum(name string) string {
	fd := m.fd(name)
	v := fd.Enum().Values().ByNumber(m.m.Get(fd).Enum())
	if v == nil {
		return fmt.Sprint(m.m.Get(fd).Enum())
	}
	return string(v.Name())
}

func (m msg) list(name string) []protoreflect.Value {
	l := m.m.Get(m.fd(name)).List()
	out := make([]protoreflect.Value, l.Len())
	for i := range out {
		out[i] = l.Get(i)
	}
	return out
}

// enumValue is the number of a value of the enum that field name of
// message md has, by the value's name.
func enumValue(md protoreflect.MessageDescriptor, field, value string) uint64 {
	fd := md.Fields().ByName(protoreflect.Name(field))
	if fd.Enum() != nil {
		return uint64(fd.Enum().Values().ByName(protoreflect.Name(value)).Number())
	}
	// a uint32 whose values an enum of the message names
	// (TracePacket.sequence_flags: TracePacket.SequenceFlags)
	for i := 0; i < md.Enums().Len(); i++ {
		if v := md.Enums().Get(i).Values().ByName(protoreflect.Name(value)); v != nil {
			return uint64(v.Number())
		}
	}
	panic(fmt.Sprintf("%s.%s: no value %s", md.FullName(), field, value))
}

// schemaEvent is a TrackEvent as Perfetto's schema reads it.
type schemaEvent struct {
	ts         uint64
	seq        uint32
	track      uint64
	typ        string
	name       string
	categories []string
	ann        map[string]string // name -> "kind value"
	counter    int64
}

type schemaTrack struct {
	name            string
	parent          uint64
	pid, tid        int64
	process, thread bool
	counterUnit     string
}

// PerfettoSchema decodes the trace file with Perfetto's own schema and
// checks it holds exactly want and the losses, as Perfetto would read it:
// no field the schema does not know; each sequence's first packet clears
// its incremental state and says it is first, a packet that interns or
// uses interned names says it needs that state, and interned ids resolve
// on their sequence; the clock snapshot makes BOOTTIME the trace clock;
// every record's event on its thread's track (a thread descriptor under
// its process's, or a track "pid P tid T" under its target's) with its
// type, time, name, category and debug annotations; the losses on the
// gprobes track and its counter.
func PerfettoSchema(t testing.TB, path string, want []timeline.Event, losses []timeline.Loss) {
	t.Helper()
	md := traceSchema(t)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	trace := dynamicpb.NewMessage(md)
	if err := proto.Unmarshal(b, trace); err != nil {
		t.Fatalf("Perfetto's schema: %s does not decode as a Trace: %v", path, err)
	}
	if u := unknownFields(trace, "Trace", nil); len(u) > 0 {
		t.Fatalf("Perfetto's schema: %d places it does not know, the first:\n%s", len(u), u[0])
	}
	packetMD := md.Fields().ByName("packet").Message()
	cleared := enumValue(packetMD, "sequence_flags", "SEQ_INCREMENTAL_STATE_CLEARED")
	needs := enumValue(packetMD, "sequence_flags", "SEQ_NEEDS_INCREMENTAL_STATE")
	type interned struct{ names, cats, anns map[uint64]string }
	state := map[uint32]*interned{}
	tracks := map[uint64]*schemaTrack{}
	var events []schemaEvent
	clock := ""
	packets := msg{trace}.list("packet")
	for i, v := range packets {
		p := msg{v.Message()}
		seq := uint32(p.u("trusted_packet_sequence_id"))
		flags := p.u("sequence_flags")
		st := state[seq]
		if st == nil {
			if flags&cleared == 0 || !p.b("first_packet_on_sequence") {
				t.Errorf("Perfetto's schema: packet %d, the first of sequence %d: flags %d, first_packet_on_sequence %v", i, seq, flags, p.b("first_packet_on_sequence"))
			}
		}
		if flags&cleared != 0 || st == nil {
			st = &interned{map[uint64]string{}, map[uint64]string{}, map[uint64]string{}}
			state[seq] = st
		}
		if p.has("interned_data") {
			if flags&needs == 0 {
				t.Errorf("Perfetto's schema: packet %d interns without SEQ_NEEDS_INCREMENTAL_STATE", i)
			}
			in := p.sub("interned_data")
			for _, f := range []struct {
				field string
				to    map[uint64]string
			}{{"event_names", st.names}, {"event_categories", st.cats}, {"debug_annotation_names", st.anns}} {
				for _, e := range in.list(f.field) {
					em := msg{e.Message()}
					f.to[em.u("iid")] = em.s("name")
				}
			}
		}
		if p.has("clock_snapshot") {
			cs := p.sub("clock_snapshot")
			clock = cs.enum("primary_trace_clock")
			var ids []uint64
			for _, c := range cs.list("clocks") {
				ids = append(ids, msg{c.Message()}.u("clock_id"))
			}
			slices.Sort(ids)
			boot := enumValue(cs.m.Descriptor(), "primary_trace_clock", "BUILTIN_CLOCK_BOOTTIME")
			real := enumValue(cs.m.Descriptor(), "primary_trace_clock", "BUILTIN_CLOCK_REALTIME")
			if !slices.Equal(ids, []uint64{real, boot}) {
				t.Errorf("Perfetto's schema: the clock snapshot's clocks %v, want REALTIME and BOOTTIME", ids)
			}
		}
		if p.has("track_descriptor") {
			d := p.sub("track_descriptor")
			tr := &schemaTrack{name: d.s("name"), parent: d.u("parent_uuid")}
			if d.has("process") {
				tr.process, tr.pid = true, d.sub("process").i("pid")
			}
			if d.has("thread") {
				th := d.sub("thread")
				tr.thread, tr.pid, tr.tid = true, th.i("pid"), th.i("tid")
			}
			if d.has("counter") {
				tr.counterUnit = d.sub("counter").enum("unit")
			}
			tracks[d.u("uuid")] = tr
		}
		if !p.has("track_event") {
			continue
		}
		te := p.sub("track_event")
		ev := schemaEvent{ts: p.u("timestamp"), seq: seq, track: te.u("track_uuid"), typ: te.enum("type"), ann: map[string]string{}}
		if (te.has("name_iid") || len(te.list("category_iids")) > 0) && flags&needs == 0 {
			t.Errorf("Perfetto's schema: packet %d uses interned names without SEQ_NEEDS_INCREMENTAL_STATE", i)
		}
		lookup := func(m map[uint64]string, iid uint64, what string) string {
			s, ok := m[iid]
			if !ok {
				t.Errorf("Perfetto's schema: packet %d: %s iid %d not interned on sequence %d", i, what, iid, seq)
			}
			return s
		}
		if te.has("name_iid") {
			ev.name = lookup(st.names, te.u("name_iid"), "event name")
		} else {
			ev.name = te.s("name")
		}
		for _, c := range te.list("category_iids") {
			ev.categories = append(ev.categories, lookup(st.cats, c.Uint(), "category"))
		}
		for _, c := range te.list("categories") {
			ev.categories = append(ev.categories, c.String())
		}
		if te.has("counter_value") {
			ev.counter = te.i("counter_value")
		}
		for _, a := range te.list("debug_annotations") {
			am := msg{a.Message()}
			name := am.s("name")
			if am.has("name_iid") {
				name = lookup(st.anns, am.u("name_iid"), "annotation name")
			}
			val := ""
			switch {
			case am.has("bool_value"):
				val = fmt.Sprintf("bool %v", am.b("bool_value"))
			case am.has("uint_value"):
				val = fmt.Sprintf("uint %d", am.u("uint_value"))
			case am.has("int_value"):
				val = fmt.Sprintf("int %d", am.i("int_value"))
			case am.has("string_value"):
				val = fmt.Sprintf("string %q", am.s("string_value"))
			case am.has("pointer_value"):
				val = fmt.Sprintf("pointer %#x", am.u("pointer_value"))
			default:
				t.Errorf("Perfetto's schema: packet %d: annotation %s has no value", i, name)
			}
			if _, dup := ev.ann[name]; dup {
				t.Errorf("Perfetto's schema: packet %d: annotation %s twice", i, name)
			}
			ev.ann[name] = val
		}
		events = append(events, ev)
	}
	if clock != "BUILTIN_CLOCK_BOOTTIME" {
		t.Errorf("Perfetto's schema: primary trace clock %q, want BUILTIN_CLOCK_BOOTTIME", clock)
	}
	checkSchemaEvents(t, tracks, events, want, losses)
}

// the tracks gprobes writes for itself (package perfetto's numbers, which
// the schema has no word on: a uuid is any number)
const (
	uuidGprobes = 1
	uuidLost    = 2
	seqGprobes  = 1
)

func checkSchemaEvents(t testing.TB, tracks map[uint64]*schemaTrack, events []schemaEvent, want []timeline.Event, losses []timeline.Loss) {
	t.Helper()
	byTrack := map[uint64][]schemaEvent{}
	var lost, counter []schemaEvent
	seqOf := map[uint64]uint32{}
	for _, e := range events {
		switch e.track {
		case uuidGprobes:
			lost = append(lost, e)
			continue
		case uuidLost:
			counter = append(counter, e)
			continue
		}
		if e.seq == seqGprobes {
			t.Errorf("Perfetto's schema: a record's event on gprobes' sequence")
		}
		if s, ok := seqOf[e.track]; ok && s != e.seq {
			t.Errorf("Perfetto's schema: track %d on sequences %d and %d", e.track, s, e.seq)
		}
		seqOf[e.track] = e.seq
		byTrack[e.track] = append(byTrack[e.track], e)
	}
	order, wantBy := byThread(want)
	if len(byTrack) != len(wantBy) {
		t.Errorf("Perfetto's schema: %d tracks with events, want %d", len(byTrack), len(wantBy))
	}
	for _, k := range order {
		var found []uint64
		for uuid, tr := range tracks {
			parent := tracks[tr.parent]
			if parent == nil {
				continue
			}
			if timeline.Process(k.Target) {
				if tr.thread && tr.pid == int64(k.Pid) && tr.tid == int64(k.Tid) && parent.process && parent.pid == int64(k.Pid) {
					found = append(found, uuid)
				}
			} else if tr.name == fmt.Sprintf("pid %d tid %d", k.Pid, k.Tid) && parent.name == k.Target && !parent.process {
				found = append(found, uuid)
			}
		}
		if len(found) != 1 {
			t.Errorf("Perfetto's schema: thread %+v: tracks %v, want one", k, found)
			continue
		}
		g, w := byTrack[found[0]], wantBy[k]
		if len(g) != len(w) {
			t.Errorf("Perfetto's schema: thread %+v: %d events, want %d", k, len(g), len(w))
			continue
		}
		for i := range w {
			if err := schemaEventIs(g[i], w[i]); err != nil {
				t.Errorf("Perfetto's schema: thread %+v event %d: %v\n got %+v\nwant %+v", k, i, err, g[i], *w[i].Record)
				return
			}
		}
	}
	if tr := tracks[uuidGprobes]; tr == nil || tr.name != "gprobes" {
		t.Errorf("Perfetto's schema: the gprobes track: %+v", tr)
	}
	if tr := tracks[uuidLost]; tr == nil || tr.counterUnit != "UNIT_COUNT" || tr.parent != uuidGprobes || tr.name != "gprobes: records lost" {
		t.Errorf("Perfetto's schema: the lost-records counter track: %+v", tr)
	}
	if len(lost) != len(losses) || len(counter) != len(losses)+1 {
		t.Fatalf("Perfetto's schema: %d lost events and %d counter values, want %d and %d", len(lost), len(counter), len(losses), len(losses)+1)
	}
	if c := counter[0]; c.typ != "TYPE_COUNTER" || c.counter != 0 {
		t.Errorf("Perfetto's schema: the counter starts %+v", c)
	}
	var total uint64
	for i, l := range losses {
		total += l.Records
		e := lost[i]
		wantAnn := map[string]string{"target": fmt.Sprintf("string %q", l.Target), "module": fmt.Sprintf("string %q", l.Module),
			"minor": fmt.Sprintf("int %d", l.Minor), "location": fmt.Sprintf("string %q", l.Location), "records": fmt.Sprintf("uint %d", l.Records),
			"why": fmt.Sprintf("string %q", l.Why)}
		if e.typ != "TYPE_INSTANT" || e.name != "records lost" || !slices.Equal(e.categories, []string{"lost"}) || !mapsEqual(e.ann, wantAnn) {
			t.Errorf("Perfetto's schema: loss %d: %+v, want %+v", i, e, l)
		}
		if c := counter[i+1]; c.typ != "TYPE_COUNTER" || c.counter != int64(total) || c.ts != e.ts {
			t.Errorf("Perfetto's schema: counter %d: %+v, want %d at %d", i+1, c, total, e.ts)
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// schemaEventIs compares an event read with Perfetto's schema with the
// record it should be (docs/records.md: the Perfetto mapping).
func schemaEventIs(g schemaEvent, w timeline.Event) error {
	r := w.Record
	typ := map[timeline.EventType]string{timeline.Instant: "TYPE_INSTANT", timeline.Begin: "TYPE_SLICE_BEGIN", timeline.End: "TYPE_SLICE_END"}[w.Type]
	if g.typ != typ {
		return fmt.Errorf("type %s, want %s", g.typ, typ)
	}
	if g.ts != timeline.Nanos(r.Time) {
		return fmt.Errorf("timestamp %d, want %d", g.ts, timeline.Nanos(r.Time))
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
	if g.name != name {
		return fmt.Errorf("name %q, want %q", g.name, name)
	}
	if !slices.Equal(g.categories, []string{string(r.Kind)}) {
		return fmt.Errorf("categories %q, want [%s]", g.categories, r.Kind)
	}
	p := ""
	if w.Type == timeline.End {
		p = "return."
	}
	want := map[string]string{
		p + "target": fmt.Sprintf("string %q", r.Target), p + "module": fmt.Sprintf("string %q", r.Module),
		p + "major": fmt.Sprintf("uint %d", r.Major), p + "minor": fmt.Sprintf("uint %d", r.Minor),
		p + "location": fmt.Sprintf("string %q", r.Location), p + "address": fmt.Sprintf("pointer %#x", r.Address),
		p + "cpu": fmt.Sprintf("int %d", r.CPU),
	}
	if r.Probe != "" {
		want[p+"probe"] = fmt.Sprintf("string %q", r.Probe)
	}
	if r.Kind == probe.RecordException {
		want[p+"exception"], want[p+"pc"], want[p+"line"] = fmt.Sprintf("string %q", r.Exception), fmt.Sprintf("uint %d", r.PC), fmt.Sprintf("string %q", r.Line)
	} else {
		want[p+"exit"], want[p+"data"] = fmt.Sprintf("uint %d", r.Exit), fmt.Sprintf("string %q", hex.EncodeToString(r.Data))
		if r.Truncated {
			want[p+"truncated"] = "bool true"
		}
		if r.Dump != "" {
			want[p+"dump"] = fmt.Sprintf("string %q", r.Dump)
		}
		if r.Debugger != "" {
			want[p+"debugger"] = fmt.Sprintf("string %q", r.Debugger)
		}
		for i, st := range r.Stacks {
			want[p+probe.StackName(r.Stacks, i)] = fmt.Sprintf("string %q", st.Text())
		}
	}
	if !mapsEqual(g.ann, want) {
		return fmt.Errorf("annotations %v, want %v", g.ann, want)
	}
	return nil
}
