package perfetto

import (
	"encoding/hex"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/timeline"
)

// Fixed track uuids and the sequence of gprobes' own packets.
const (
	TrackGprobes = 1 // the "gprobes" track: "records lost" instants
	TrackLost    = 2 // the "gprobes: records lost" counter track
	SeqGprobes   = 1
	firstUUID    = 3 // processes', targets' and threads' tracks from here
	firstSeq     = 2 // threads' sequences from here

	// ChunkSize is how many bytes of packets are gathered before they are
	// written.
	ChunkSize = 64 << 10
)

// Writer writes a Perfetto trace to a file. It implements timeline.Writer;
// it is not safe for concurrent use.
type Writer struct {
	file   *timeline.File
	opts   timeline.Options
	buf    []byte
	recs   []*timeline.Record // the records in buf
	gen    int                // incremented when a chunk is lost: every sequence starts again
	seqs   map[timeline.Thread]*sequence
	nseq   uint32
	uuid   uint64
	parent map[parentKey]*parentTrack
	losses []timeline.Loss
	first  uint64
	last   uint64
	any    bool
	scr    []byte // scratch for nested messages
}

type parentKey struct {
	target string // a kernel's or a guest's: its track
	pid    int    // a process target's: its process track
}

type parentTrack struct {
	uuid uint64
	gen  int // the generation its descriptor was written in (0: never)
	desc []byte
}

// sequence is one thread's track and packet sequence.
type sequence struct {
	id     uint32
	uuid   uint64
	parent *parentTrack
	thread timeline.Thread
	gen    int // the generation its state was cleared in (0: never)
	intern [3]map[string]uint64
	sent   [3]map[uint64]bool // interned entries emitted since the state was cleared
}

// the interning indexes of a sequence
const (
	ixNames = iota
	ixCategories
	ixAnnotations
)

// Create creates (truncating) the trace file at path.
func Create(path string, opts timeline.Options) (*Writer, error) {
	f, err := timeline.CreateFile(path)
	if err != nil {
		return nil, err
	}
	return &Writer{file: f, opts: opts, gen: 1, seqs: map[timeline.Thread]*sequence{}, nseq: firstSeq - 1, uuid: firstUUID - 1,
		parent: map[parentKey]*parentTrack{}}, nil
}

// Event implements timeline.Writer.
func (w *Writer) Event(ev timeline.Event) {
	r := ev.Record
	s := w.sequence(r)
	ts := timeline.Nanos(r.Time)
	if !w.any || ts < w.first {
		w.first = ts
	}
	w.last = max(w.last, ts)
	w.any = true
	if s.gen != w.gen {
		w.describe(s)
	}
	flags := uint64(SeqNeedsIncrementalState)
	// the interned entries this packet adds, then the event
	var interned []byte
	name, cat := "", string(r.Kind)
	switch {
	case r.Kind == probe.RecordException:
		name = "exception " + r.Exception
	case r.Probe != "" && ev.Type == timeline.Instant:
		name = r.Probe + " " + r.Location
	default:
		name = r.Location
	}
	var te []byte
	te = protowire.AppendTag(te, fEventType, protowire.VarintType)
	switch ev.Type {
	case timeline.Begin:
		te = protowire.AppendVarint(te, TypeSliceBegin)
	case timeline.End:
		te = protowire.AppendVarint(te, TypeSliceEnd)
	default:
		te = protowire.AppendVarint(te, TypeInstant)
	}
	te = protowire.AppendTag(te, fEventTrackUUID, protowire.VarintType)
	te = protowire.AppendVarint(te, s.uuid)
	var iid uint64
	iid, interned = s.iid(ixCategories, cat, interned)
	te = protowire.AppendTag(te, fEventCategoryIIDs, protowire.VarintType)
	te = protowire.AppendVarint(te, iid)
	if ev.Type != timeline.End {
		iid, interned = s.iid(ixNames, name, interned)
		te = protowire.AppendTag(te, fEventNameIID, protowire.VarintType)
		te = protowire.AppendVarint(te, iid)
	}
	prefix := ""
	if ev.Type == timeline.End {
		prefix = "return."
	}
	te, interned = w.annotations(te, interned, s, prefix, r)

	var p []byte
	p = protowire.AppendTag(p, fPacketTimestamp, protowire.VarintType)
	p = protowire.AppendVarint(p, ts)
	p = appendSeq(p, s.id, flags)
	if len(interned) > 0 {
		p = protowire.AppendTag(p, fPacketInternedData, protowire.BytesType)
		p = protowire.AppendBytes(p, interned)
	}
	p = protowire.AppendTag(p, fPacketTrackEvent, protowire.BytesType)
	p = protowire.AppendBytes(p, te)
	w.packet(p, r)
}

// annotations appends the record's fields as debug annotations.
func (w *Writer) annotations(te, interned []byte, s *sequence, prefix string, r *timeline.Record) ([]byte, []byte) {
	add := func(name string, field protowire.Number, v uint64, str string, isString bool) {
		var iid uint64
		iid, interned = s.iid(ixAnnotations, prefix+name, interned)
		a := w.scr[:0]
		a = protowire.AppendTag(a, fAnnotNameIID, protowire.VarintType)
		a = protowire.AppendVarint(a, iid)
		if isString {
			a = protowire.AppendTag(a, field, protowire.BytesType)
			a = protowire.AppendString(a, str)
		} else {
			a = protowire.AppendTag(a, field, protowire.VarintType)
			a = protowire.AppendVarint(a, v)
		}
		te = protowire.AppendTag(te, fEventAnnotations, protowire.BytesType)
		te = protowire.AppendBytes(te, a)
		w.scr = a
	}
	str := func(name, v string) { add(name, fAnnotString, 0, v, true) }
	num := func(name string, v uint64) { add(name, fAnnotUint, v, "", false) }
	str("target", r.Target)
	str("module", r.Module)
	num("major", uint64(r.Major))
	num("minor", uint64(r.Minor))
	str("location", r.Location)
	if r.Probe != "" {
		str("probe", r.Probe)
	}
	add("address", fAnnotPointer, r.Address, "", false)
	add("cpu", fAnnotInt, uint64(int64(r.CPU)), "", false)
	if r.Kind == probe.RecordException {
		str("exception", r.Exception)
		num("pc", uint64(r.PC))
		str("line", r.Line)
		return te, interned
	}
	num("exit", uint64(r.Exit))
	str("data", hex.EncodeToString(r.Data))
	if r.Truncated {
		add("truncated", fAnnotBool, 1, "", false)
	}
	if r.Dump != "" {
		str("dump", r.Dump)
	}
	if r.Debugger != "" {
		str("debugger", r.Debugger)
	}
	for i, st := range r.Stacks {
		str(probe.StackName(r.Stacks, i), st.Text())
	}
	return te, interned
}

// iid is the interning id of name in the sequence's index ix; an entry
// not yet sent since the state was cleared is appended to interned.
func (s *sequence) iid(ix int, name string, interned []byte) (uint64, []byte) {
	id, ok := s.intern[ix][name]
	if !ok {
		id = uint64(len(s.intern[ix]) + 1) // 0 is not an iid
		s.intern[ix][name] = id
	}
	if !s.sent[ix][id] {
		s.sent[ix][id] = true
		field := [...]protowire.Number{ixNames: fInternedEventNames, ixCategories: fInternedCategories, ixAnnotations: fInternedAnnotationNames}[ix]
		var e []byte
		e = protowire.AppendTag(e, fInternedIID, protowire.VarintType)
		e = protowire.AppendVarint(e, id)
		e = protowire.AppendTag(e, fInternedName, protowire.BytesType)
		e = protowire.AppendString(e, name)
		interned = protowire.AppendTag(interned, field, protowire.BytesType)
		interned = protowire.AppendBytes(interned, e)
	}
	return id, interned
}

// sequence returns the thread's sequence, making it (and its parent
// track) at the thread's first record.
func (w *Writer) sequence(r *timeline.Record) *sequence {
	key := r.Thread()
	if s := w.seqs[key]; s != nil {
		return s
	}
	w.nseq++
	s := &sequence{id: w.nseq, thread: key}
	for i := range s.intern {
		s.intern[i] = map[string]uint64{}
		s.sent[i] = map[uint64]bool{}
	}
	pk := parentKey{target: key.Target}
	if timeline.Process(key.Target) {
		pk = parentKey{pid: key.Pid}
	}
	pt := w.parent[pk]
	if pt == nil {
		w.uuid++
		pt = &parentTrack{uuid: w.uuid}
		var d []byte
		d = protowire.AppendTag(d, fTrackUUID, protowire.VarintType)
		d = protowire.AppendVarint(d, pt.uuid)
		if timeline.Process(key.Target) {
			var pd []byte
			pd = protowire.AppendTag(pd, fProcessPid, protowire.VarintType)
			pd = protowire.AppendVarint(pd, uint64(int64(int32(key.Pid))))
			d = protowire.AppendTag(d, fTrackProcess, protowire.BytesType)
			d = protowire.AppendBytes(d, pd)
		} else {
			d = protowire.AppendTag(d, fTrackName, protowire.BytesType)
			d = protowire.AppendString(d, key.Target)
		}
		pt.desc = d
		w.parent[pk] = pt
	}
	s.parent = pt
	w.uuid++
	s.uuid = w.uuid
	w.seqs[key] = s
	return s
}

// describe starts (or starts again, after a lost chunk) the sequence: the
// parent's and the thread's track descriptors, the first packet clearing
// the incremental state.
func (w *Writer) describe(s *sequence) {
	flags := uint64(SeqIncrementalStateCleared)
	first := s.gen == 0
	if s.parent.gen != w.gen {
		w.packet(descriptorPacket(s.id, flags, first, s.parent.desc), nil)
		s.parent.gen = w.gen
		flags, first = 0, false
	}
	var d []byte
	d = protowire.AppendTag(d, fTrackUUID, protowire.VarintType)
	d = protowire.AppendVarint(d, s.uuid)
	d = protowire.AppendTag(d, fTrackParent, protowire.VarintType)
	d = protowire.AppendVarint(d, s.parent.uuid)
	if timeline.Process(s.thread.Target) {
		var td []byte
		td = protowire.AppendTag(td, fThreadPid, protowire.VarintType)
		td = protowire.AppendVarint(td, uint64(int64(int32(s.thread.Pid))))
		td = protowire.AppendTag(td, fThreadTid, protowire.VarintType)
		td = protowire.AppendVarint(td, uint64(int64(int32(s.thread.Tid))))
		d = protowire.AppendTag(d, fTrackThread, protowire.BytesType)
		d = protowire.AppendBytes(d, td)
	} else {
		d = protowire.AppendTag(d, fTrackName, protowire.BytesType)
		d = protowire.AppendString(d, fmt.Sprintf("pid %d tid %d", s.thread.Pid, s.thread.Tid))
	}
	w.packet(descriptorPacket(s.id, flags, first, d), nil)
	s.gen = w.gen
	for i := range s.sent {
		clear(s.sent[i])
	}
}

func descriptorPacket(seq uint32, flags uint64, first bool, desc []byte) []byte {
	var p []byte
	p = appendSeq(p, seq, flags)
	if first {
		p = protowire.AppendTag(p, fPacketFirstOnSequence, protowire.VarintType)
		p = protowire.AppendVarint(p, 1)
	}
	p = protowire.AppendTag(p, fPacketTrackDescriptor, protowire.BytesType)
	return protowire.AppendBytes(p, desc)
}

func appendSeq(p []byte, seq uint32, flags uint64) []byte {
	p = protowire.AppendTag(p, fPacketSequenceID, protowire.VarintType)
	p = protowire.AppendVarint(p, uint64(seq))
	if flags != 0 {
		p = protowire.AppendTag(p, fPacketSequenceFlags, protowire.VarintType)
		p = protowire.AppendVarint(p, flags)
	}
	return p
}

// packet adds one TracePacket (of the record r, if not nil) to the chunk.
func (w *Writer) packet(p []byte, r *timeline.Record) {
	w.buf = protowire.AppendTag(w.buf, fTracePacket, protowire.BytesType)
	w.buf = protowire.AppendBytes(w.buf, p)
	if r != nil {
		w.recs = append(w.recs, r)
	}
	if len(w.buf) >= ChunkSize {
		w.flush()
	}
}

// flush writes the chunk. When it cannot be written, its records are
// lost, and with them descriptors and interned entries later packets
// would need: every sequence starts again (a new generation).
func (w *Writer) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	err := w.file.Append(w.buf)
	if err != nil {
		for _, r := range w.recs {
			if w.opts.OnLost != nil {
				w.opts.OnLost(r, err)
			}
		}
		w.gen++
	}
	w.buf = w.buf[:0]
	clear(w.recs)
	w.recs = w.recs[:0]
	return err
}

// Flush implements timeline.Flusher: the chunk is written now (a record
// that could not be is reported to Options.OnLost). The clock snapshot
// and the lost counts still wait for Close.
func (w *Writer) Flush() error { return w.flush() }

// Loss implements timeline.Writer: the counts are written at Close.
func (w *Writer) Loss(l timeline.Loss) { w.losses = append(w.losses, l) }

// Close writes gprobes' own sequence (the clock snapshot, the gprobes
// track and the lost-records counter, with a count for each loss) and
// what is left of the chunk.
func (w *Writer) Close() error {
	start := w.first
	if !w.any && len(w.losses) > 0 {
		start = timeline.Nanos(w.losses[0].Time)
	}
	// the clock snapshot: the records' wall-clock times are the trace's
	// clock, so REALTIME and BOOTTIME read the same here
	var cs []byte
	for _, id := range []uint64{ClockBoottime, ClockRealtime} {
		var c []byte
		c = protowire.AppendTag(c, fClockID, protowire.VarintType)
		c = protowire.AppendVarint(c, id)
		c = protowire.AppendTag(c, fClockTimestamp, protowire.VarintType)
		c = protowire.AppendVarint(c, start)
		cs = protowire.AppendTag(cs, fClockSnapshotClocks, protowire.BytesType)
		cs = protowire.AppendBytes(cs, c)
	}
	cs = protowire.AppendTag(cs, fClockSnapshotPrimary, protowire.VarintType)
	cs = protowire.AppendVarint(cs, ClockBoottime)
	var p []byte
	p = protowire.AppendTag(p, fPacketTimestamp, protowire.VarintType)
	p = protowire.AppendVarint(p, start)
	p = appendSeq(p, SeqGprobes, SeqIncrementalStateCleared)
	p = protowire.AppendTag(p, fPacketFirstOnSequence, protowire.VarintType)
	p = protowire.AppendVarint(p, 1)
	p = protowire.AppendTag(p, fPacketClockSnapshot, protowire.BytesType)
	w.packet(protowire.AppendBytes(p, cs), nil)

	var d []byte
	d = protowire.AppendTag(d, fTrackUUID, protowire.VarintType)
	d = protowire.AppendVarint(d, TrackGprobes)
	d = protowire.AppendTag(d, fTrackName, protowire.BytesType)
	d = protowire.AppendString(d, "gprobes")
	w.packet(descriptorPacket(SeqGprobes, 0, false, d), nil)
	d = d[:0]
	d = protowire.AppendTag(d, fTrackUUID, protowire.VarintType)
	d = protowire.AppendVarint(d, TrackLost)
	d = protowire.AppendTag(d, fTrackParent, protowire.VarintType)
	d = protowire.AppendVarint(d, TrackGprobes)
	d = protowire.AppendTag(d, fTrackName, protowire.BytesType)
	d = protowire.AppendString(d, "gprobes: records lost")
	var cd []byte
	cd = protowire.AppendTag(cd, fCounterUnit, protowire.VarintType)
	cd = protowire.AppendVarint(cd, UnitCount)
	d = protowire.AppendTag(d, fTrackCounter, protowire.BytesType)
	d = protowire.AppendBytes(d, cd)
	w.packet(descriptorPacket(SeqGprobes, 0, false, d), nil)

	w.counter(start, 0)
	var total uint64
	end := w.last
	for _, l := range w.losses {
		ts := max(timeline.Nanos(l.Time), end)
		end = ts
		total += l.Records
		var te []byte
		te = protowire.AppendTag(te, fEventType, protowire.VarintType)
		te = protowire.AppendVarint(te, TypeInstant)
		te = protowire.AppendTag(te, fEventTrackUUID, protowire.VarintType)
		te = protowire.AppendVarint(te, TrackGprobes)
		te = protowire.AppendTag(te, fEventCategories, protowire.BytesType)
		te = protowire.AppendString(te, "lost")
		te = protowire.AppendTag(te, fEventName, protowire.BytesType)
		te = protowire.AppendString(te, "records lost")
		te = appendNamedAnnotation(te, "target", fAnnotString, 0, l.Target)
		te = appendNamedAnnotation(te, "module", fAnnotString, 0, l.Module)
		te = appendNamedAnnotation(te, "minor", fAnnotInt, uint64(int64(l.Minor)), "")
		te = appendNamedAnnotation(te, "location", fAnnotString, 0, l.Location)
		te = appendNamedAnnotation(te, "records", fAnnotUint, l.Records, "")
		te = appendNamedAnnotation(te, "why", fAnnotString, 0, l.Why)
		var p []byte
		p = protowire.AppendTag(p, fPacketTimestamp, protowire.VarintType)
		p = protowire.AppendVarint(p, ts)
		p = appendSeq(p, SeqGprobes, 0)
		p = protowire.AppendTag(p, fPacketTrackEvent, protowire.BytesType)
		w.packet(protowire.AppendBytes(p, te), nil)
		w.counter(ts, total)
	}
	err := w.flush()
	if cerr := w.file.Close(); err == nil {
		err = cerr
	}
	return err
}

// counter writes a value of the lost-records counter.
func (w *Writer) counter(ts, v uint64) {
	var te []byte
	te = protowire.AppendTag(te, fEventType, protowire.VarintType)
	te = protowire.AppendVarint(te, TypeCounter)
	te = protowire.AppendTag(te, fEventTrackUUID, protowire.VarintType)
	te = protowire.AppendVarint(te, TrackLost)
	te = protowire.AppendTag(te, fEventCounterValue, protowire.VarintType)
	te = protowire.AppendVarint(te, v)
	var p []byte
	p = protowire.AppendTag(p, fPacketTimestamp, protowire.VarintType)
	p = protowire.AppendVarint(p, ts)
	p = appendSeq(p, SeqGprobes, 0)
	p = protowire.AppendTag(p, fPacketTrackEvent, protowire.BytesType)
	w.packet(protowire.AppendBytes(p, te), nil)
}

// appendNamedAnnotation appends a debug annotation with its name inline
// (gprobes' own sequence interns nothing).
func appendNamedAnnotation(te []byte, name string, field protowire.Number, v uint64, s string) []byte {
	var a []byte
	a = protowire.AppendTag(a, fAnnotName, protowire.BytesType)
	a = protowire.AppendString(a, name)
	if field == fAnnotString {
		a = protowire.AppendTag(a, field, protowire.BytesType)
		a = protowire.AppendString(a, s)
	} else {
		a = protowire.AppendTag(a, field, protowire.VarintType)
		a = protowire.AppendVarint(a, v)
	}
	te = protowire.AppendTag(te, fEventAnnotations, protowire.BytesType)
	return protowire.AppendBytes(te, a)
}
