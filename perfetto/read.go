package perfetto

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Packet is one TracePacket as Read decodes it: the fields this package
// writes (others are skipped).
type Packet struct {
	Timestamp       uint64
	HasTimestamp    bool
	Sequence        uint32
	Flags           uint32
	FirstOnSequence bool
	Interned        *Interned
	Track           *Track
	Event           *TrackEvent
	Clock           *ClockSnapshot
}

// Interned is a packet's InternedData: iid → name, per index.
type Interned struct {
	EventNames, Categories, AnnotationNames map[uint64]string
}

// Track is a TrackDescriptor.
type Track struct {
	UUID, Parent uint64
	Name         string
	Process      *Process
	Thread       *ThreadDesc
	Counter      bool
	CounterUnit  uint64
}

// Process is a ProcessDescriptor.
type Process struct {
	Pid  int32
	Name string
}

// ThreadDesc is a ThreadDescriptor.
type ThreadDesc struct {
	Pid, Tid int32
	Name     string
}

// TrackEvent is a TrackEvent with its names as written: interned ids or
// inline strings.
type TrackEvent struct {
	Type         uint64
	TrackUUID    uint64
	NameIID      uint64
	Name         string
	CategoryIIDs []uint64
	Categories   []string
	CounterValue int64
	HasCounter   bool
	Annotations  []Annotation
}

// Annotation is a DebugAnnotation: its name (interned or inline) and its
// value, one of the kinds this package writes.
type Annotation struct {
	NameIID uint64
	Name    string
	Kind    string // "bool", "uint", "int", "string", "pointer"
	Uint    uint64 // bool, uint, pointer; int as its two's complement
	String  string
}

// ClockSnapshot is a ClockSnapshot: clock id → timestamp.
type ClockSnapshot struct {
	Clocks  map[uint64]uint64
	Primary uint64
}

// Read decodes a trace: every TracePacket of a Trace message. It fails on
// bytes that are not a Trace, never panics.
func Read(b []byte) ([]Packet, error) {
	var out []Packet
	err := fields(b, func(num protowire.Number, typ protowire.Type, v uint64, m []byte) error {
		if num != fTracePacket {
			return nil
		}
		if typ != protowire.BytesType {
			return errors.New("Trace.packet is not a message")
		}
		p, err := readPacket(m)
		if err != nil {
			return fmt.Errorf("packet %d: %w", len(out), err)
		}
		out = append(out, p)
		return nil
	})
	return out, err
}

// fields calls f for each field of the message b: a varint's value in v, a
// length-delimited field's bytes in m (fixed-size ones in v as well).
func fields(b []byte, f func(num protowire.Number, typ protowire.Type, v uint64, m []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v uint64
		var m []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			m, n = protowire.ConsumeBytes(b)
		case protowire.Fixed64Type:
			v, n = protowire.ConsumeFixed64(b)
		case protowire.Fixed32Type:
			var x uint32
			x, n = protowire.ConsumeFixed32(b)
			v = uint64(x)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := f(num, typ, v, m); err != nil {
			return err
		}
	}
	return nil
}

func wantType(name string, typ, want protowire.Type) error {
	if typ != want {
		return fmt.Errorf("%s: wire type %d, want %d", name, typ, want)
	}
	return nil
}

func readPacket(b []byte) (Packet, error) {
	var p Packet
	err := fields(b, func(num protowire.Number, typ protowire.Type, v uint64, m []byte) error {
		var err error
		switch num {
		case fPacketTimestamp:
			p.Timestamp, p.HasTimestamp = v, true
			return wantType("timestamp", typ, protowire.VarintType)
		case fPacketSequenceID:
			p.Sequence = uint32(v)
			return wantType("trusted_packet_sequence_id", typ, protowire.VarintType)
		case fPacketSequenceFlags:
			p.Flags = uint32(v)
			return wantType("sequence_flags", typ, protowire.VarintType)
		case fPacketFirstOnSequence:
			p.FirstOnSequence = v != 0
			return wantType("first_packet_on_sequence", typ, protowire.VarintType)
		case fPacketInternedData:
			if err = wantType("interned_data", typ, protowire.BytesType); err == nil {
				p.Interned, err = readInterned(m)
			}
		case fPacketTrackDescriptor:
			if err = wantType("track_descriptor", typ, protowire.BytesType); err == nil {
				p.Track, err = readTrack(m)
			}
		case fPacketTrackEvent:
			if err = wantType("track_event", typ, protowire.BytesType); err == nil {
				p.Event, err = readEvent(m)
			}
		case fPacketClockSnapshot:
			if err = wantType("clock_snapshot", typ, protowire.BytesType); err == nil {
				p.Clock, err = readClock(m)
			}
		}
		return err
	})
	return p, err
}

func readInterned(b []byte) (*Interned, error) {
	in := &Interned{EventNames: map[uint64]string{}, Categories: map[uint64]string{}, AnnotationNames: map[uint64]string{}}
	err := fields(b, func(num protowire.Number, typ protowire.Type, v uint64, m []byte) error {
		var ix map[uint64]string
		switch num {
		case fInternedEventNames:
			ix = in.EventNames
		case fInternedCategories:
			ix = in.Categories
		case fInternedAnnotationNames:
			ix = in.AnnotationNames
		default:
			return nil
		}
		if err := wantType("interned entry", typ, protowire.BytesType); err != nil {
			return err
		}
		var iid uint64
		var name string
		err := fields(m, func(num protowire.Number, typ protowire.Type, v uint64, m []byte) error {
			switch num {
			case fInternedIID:
				iid = v
			case fInternedName:
				name = string(m)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if iid == 0 {
			return errors.New("an interned entry without an iid")
		}
		ix[iid] = name
		return nil
	})
	return in, err
}

func readTrack(b []byte) (*Track, error) {
	t := &Track{}
	err := fields(b, func(num protowire.Number, typ protowire.Type, v uint64, m []byte) error {
		switch num {
		case fTrackUUID:
			t.UUID = v
		case fTrackParent:
			t.Parent = v
		case fTrackName:
			t.Name = string(m)
		case fTrackProcess:
			t.Process = &Process{}
			return fields(m, func(num protowire.Number, typ protowire.Type, v uint64, m []byte) error {
				switch num {
				case fProcessPid:
					t.Process.Pid = int32(v)
				case fProcessName:
					t.Process.Name = string(m)
				}
				return nil
			})
		case fTrackThread:
			t.Thread = &ThreadDesc{}
			return fields(m, func(num protowire.Number, typ protowire.Type, v uint64, m []byte) error {
				switch num {
				case fThreadPid:
					t.Thread.Pid = int32(v)
				case fThreadTid:
					t.Thread.Tid = int32(v)
				case fThreadName:
					t.Thread.Name = string(m)
				}
				return nil
			})
		case fTrackCounter:
			t.Counter = true
			return fields(m, func(num protowire.Number, typ protowire.Type, v uint64, m []byte) error {
				if num == fCounterUnit {
					t.CounterUnit = v
				}
				return nil
			})
		}
		return nil
	})
	return t, err
}

func readEvent(b []byte) (*TrackEvent, error) {
	e := &TrackEvent{}
	err := fields(b, func(num protowire.Number, typ protowire.Type, v uint64, m []byte) error {
		switch num {
		case fEventType:
			e.Type = v
		case fEventTrackUUID:
			e.TrackUUID = v
		case fEventNameIID:
			e.NameIID = v
		case fEventName:
			e.Name = string(m)
		case fEventCategoryIIDs:
			if typ == protowire.BytesType { // packed
				for len(m) > 0 {
					x, n := protowire.ConsumeVarint(m)
					if n < 0 {
						return protowire.ParseError(n)
					}
					e.CategoryIIDs = append(e.CategoryIIDs, x)
					m = m[n:]
				}
				return nil
			}
			e.CategoryIIDs = append(e.CategoryIIDs, v)
		case fEventCategories:
			e.Categories = append(e.Categories, string(m))
		case fEventCounterValue:
			e.CounterValue, e.HasCounter = int64(v), true
		case fEventAnnotations:
			a, err := readAnnotation(m)
			if err != nil {
				return err
			}
			e.Annotations = append(e.Annotations, a)
		}
		return nil
	})
	return e, err
}

func readAnnotation(b []byte) (Annotation, error) {
	var a Annotation
	err := fields(b, func(num protowire.Number, typ protowire.Type, v uint64, m []byte) error {
		switch num {
		case fAnnotNameIID:
			a.NameIID = v
		case fAnnotName:
			a.Name = string(m)
		case fAnnotBool:
			a.Kind, a.Uint = "bool", v
		case fAnnotUint:
			a.Kind, a.Uint = "uint", v
		case fAnnotInt:
			a.Kind, a.Uint = "int", v
		case fAnnotPointer:
			a.Kind, a.Uint = "pointer", v
		case fAnnotString:
			a.Kind, a.String = "string", string(m)
		}
		return nil
	})
	return a, err
}

func readClock(b []byte) (*ClockSnapshot, error) {
	c := &ClockSnapshot{Clocks: map[uint64]uint64{}}
	err := fields(b, func(num protowire.Number, typ protowire.Type, v uint64, m []byte) error {
		switch num {
		case fClockSnapshotPrimary:
			c.Primary = v
		case fClockSnapshotClocks:
			var id, ts uint64
			err := fields(m, func(num protowire.Number, typ protowire.Type, v uint64, m []byte) error {
				switch num {
				case fClockID:
					id = v
				case fClockTimestamp:
					ts = v
				}
				return nil
			})
			c.Clocks[id] = ts
			return err
		}
		return nil
	})
	return c, err
}

// Event is a track event with its names resolved against its sequence's
// interned data.
type Event struct {
	Sequence    uint32
	Timestamp   uint64
	Type        uint64
	Track       *Track
	Name        string
	Categories  []string
	Counter     int64
	Annotations map[string]Annotation // by name
	Order       []string              // the annotations' names in order
}

// Resolve checks the packets as a reader must (a sequence's incremental
// state cleared before a packet that needs it; every iid interned on the
// sequence before its use; every event's track described) and returns the
// track events with their names, in order of the file, and the tracks by
// uuid.
func Resolve(packets []Packet) ([]Event, map[uint64]*Track, error) {
	type state struct {
		cleared bool
		names   [3]map[uint64]string
	}
	seqs := map[uint32]*state{}
	tracks := map[uint64]*Track{}
	var events []Event
	for i, p := range packets {
		if p.Sequence == 0 {
			return nil, nil, fmt.Errorf("packet %d: no trusted_packet_sequence_id", i)
		}
		s := seqs[p.Sequence]
		if s == nil {
			s = &state{}
			seqs[p.Sequence] = s
		}
		if p.Flags&SeqIncrementalStateCleared != 0 {
			s.cleared = true
			for j := range s.names {
				s.names[j] = map[uint64]string{}
			}
		}
		if p.Flags&SeqNeedsIncrementalState != 0 && !s.cleared {
			return nil, nil, fmt.Errorf("packet %d needs the incremental state of sequence %d, never cleared", i, p.Sequence)
		}
		if p.Interned != nil {
			if !s.cleared {
				return nil, nil, fmt.Errorf("packet %d interns data on sequence %d before its state was cleared", i, p.Sequence)
			}
			for j, ix := range []map[uint64]string{p.Interned.EventNames, p.Interned.Categories, p.Interned.AnnotationNames} {
				for iid, name := range ix {
					if old, ok := s.names[j][iid]; ok && old != name {
						return nil, nil, fmt.Errorf("packet %d: iid %d interned again as %q (was %q)", i, iid, name, old)
					}
					s.names[j][iid] = name
				}
			}
		}
		if p.Track != nil {
			if p.Track.UUID == 0 {
				return nil, nil, fmt.Errorf("packet %d: a track descriptor without a uuid", i)
			}
			tracks[p.Track.UUID] = p.Track
		}
		if p.Event == nil {
			continue
		}
		e := p.Event
		ev := Event{Sequence: p.Sequence, Timestamp: p.Timestamp, Type: e.Type, Name: e.Name, Counter: e.CounterValue,
			Annotations: map[string]Annotation{}}
		if !p.HasTimestamp {
			return nil, nil, fmt.Errorf("packet %d: a track event without a timestamp", i)
		}
		if ev.Track = tracks[e.TrackUUID]; ev.Track == nil {
			return nil, nil, fmt.Errorf("packet %d: event on track %d, not described before", i, e.TrackUUID)
		}
		lookup := func(ix int, iid uint64, what string) (string, error) {
			if p.Flags&SeqNeedsIncrementalState == 0 {
				return "", fmt.Errorf("packet %d uses an interned %s without SEQ_NEEDS_INCREMENTAL_STATE", i, what)
			}
			name, ok := s.names[ix][iid]
			if !ok {
				return "", fmt.Errorf("packet %d: %s iid %d not interned on sequence %d", i, what, iid, p.Sequence)
			}
			return name, nil
		}
		var err error
		if e.NameIID != 0 {
			if ev.Name, err = lookup(0, e.NameIID, "event name"); err != nil {
				return nil, nil, err
			}
		}
		ev.Categories = append(ev.Categories, e.Categories...)
		for _, iid := range e.CategoryIIDs {
			c, err := lookup(1, iid, "category")
			if err != nil {
				return nil, nil, err
			}
			ev.Categories = append(ev.Categories, c)
		}
		for _, a := range e.Annotations {
			if a.NameIID != 0 {
				if a.Name, err = lookup(2, a.NameIID, "annotation name"); err != nil {
					return nil, nil, err
				}
			}
			if _, dup := ev.Annotations[a.Name]; dup {
				return nil, nil, fmt.Errorf("packet %d: annotation %q twice", i, a.Name)
			}
			ev.Annotations[a.Name] = a
			ev.Order = append(ev.Order, a.Name)
		}
		events = append(events, ev)
	}
	return events, tracks, nil
}
