package ctf

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/timeline"
)

// The layout this writer produces.
const (
	magic = 0xC1FC1FC1

	streamThread = 0 // stream class of a thread's records
	streamLost   = 1 // stream class of the lost-record counts

	// event class ids, within their stream class
	evLog       = 0
	evTrace     = 1
	evException = 2
	evEntry     = 3
	evReturn    = 4
	evLost      = 0 // in streamLost

	// PacketSize is the size at which a stream's packet is closed and
	// written; MaxBuffered the most bytes all open packets may hold before
	// the largest is written.
	PacketSize  = 64 << 10
	MaxBuffered = 16 << 20
)

// Writer writes a CTF trace into a directory. It implements
// timeline.Writer; it is not safe for concurrent use.
type Writer struct {
	dir      string
	uuid     [16]byte
	opts     timeline.Options
	streams  map[timeline.Thread]*stream
	order    []*stream
	buffered int
	losses   []timeline.Loss
	first    uint64 // the earliest timestamp written
	last     uint64 // the latest
	any      bool
	hostname string
}

type stream struct {
	id     uint64 // stream instance id (the file's number)
	key    timeline.Thread
	file   *timeline.File
	buf    []byte // events of the open packet
	recs   []*timeline.Record
	begin  uint64 // first timestamp of the open packet
	end    uint64 // last timestamp written to the stream
	seq    uint64 // packets written
	events int
}

// Create makes the trace directory dir (it must not exist, or be empty)
// and returns a writer into it.
func Create(dir string, opts timeline.Options) (*Writer, error) {
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		return nil, fmt.Errorf("ctf: %s is not a directory (%s): a CTF trace is a directory of its own", dir, fi.Mode().Type())
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	if len(ents) > 0 {
		return nil, fmt.Errorf("ctf: %s is not empty: a CTF trace is a directory of its own", dir)
	}
	w := &Writer{dir: dir, opts: opts, streams: map[timeline.Thread]*stream{}}
	if _, err := rand.Read(w.uuid[:]); err != nil {
		return nil, err
	}
	w.uuid[6] = w.uuid[6]&0x0f | 0x40 // version 4
	w.uuid[8] = w.uuid[8]&0x3f | 0x80 // RFC 4122 variant
	w.hostname, _ = os.Hostname()
	// the metadata goes in first, so that a trace cut short by a crash is
	// still readable up to its last whole packet
	if err := os.WriteFile(filepath.Join(dir, "metadata"), []byte(w.metadata()), 0o644); err != nil {
		return nil, err
	}
	return w, nil
}

// Event implements timeline.Writer.
func (w *Writer) Event(ev timeline.Event) {
	r := ev.Record
	s := w.streams[r.Thread()]
	if s == nil {
		s = &stream{id: uint64(len(w.order)), key: r.Thread()}
		f, err := timeline.CreateFile(filepath.Join(w.dir, fmt.Sprintf("stream_%d", s.id)))
		if err != nil {
			w.lost(r, err)
			return
		}
		s.file = f
		w.streams[s.key] = s
		w.order = append(w.order, s)
	}
	ts := timeline.Nanos(r.Time)
	if s.events > 0 || s.seq > 0 {
		ts = max(ts, s.end) // never back
	}
	if s.events == 0 {
		s.begin = ts
	}
	s.end = ts
	if !w.any || ts < w.first {
		w.first = ts
	}
	w.last = max(w.last, ts)
	w.any = true
	n := len(s.buf)
	s.buf = appendEvent(s.buf, ev, ts)
	s.recs = append(s.recs, r)
	s.events++
	w.buffered += len(s.buf) - n
	if len(s.buf) >= PacketSize {
		w.flush(s)
	} else if w.buffered > MaxBuffered {
		big := s
		for _, o := range w.order {
			if len(o.buf) > len(big.buf) {
				big = o
			}
		}
		w.flush(big)
	}
}

func (w *Writer) lost(r *timeline.Record, err error) {
	if w.opts.OnLost != nil {
		w.opts.OnLost(r, err)
	}
}

// Loss implements timeline.Writer: the counts are written at Close.
func (w *Writer) Loss(l timeline.Loss) { w.losses = append(w.losses, l) }

// flush writes the stream's open packet.
func (w *Writer) flush(s *stream) {
	if s.events == 0 {
		return
	}
	var ctx []byte
	ctx = appendString(ctx, s.key.Target)
	p := packet(w.uuid, streamThread, s.id, s.seq, s.begin, s.end, 0, false, ctx, s.buf)
	if err := s.file.Append(p); err != nil {
		for _, r := range s.recs {
			w.lost(r, err)
		}
	} else {
		s.seq++
	}
	w.buffered -= len(s.buf)
	s.buf = s.buf[:0]
	clear(s.recs)
	s.recs = s.recs[:0]
	s.events = 0
}

// Flush implements timeline.Flusher: every stream's open packet is
// written. The lost counts still wait for Close.
func (w *Writer) Flush() error {
	for _, s := range w.order {
		w.flush(s)
	}
	return nil
}

// Close writes every open packet and the gprobes stream with the lost
// counts, if any.
func (w *Writer) Close() error {
	for _, s := range w.order {
		w.flush(s)
	}
	if len(w.losses) == 0 {
		return nil
	}
	var body []byte
	var total uint64
	begin, end := w.first, w.last
	for _, l := range w.losses {
		ts := max(timeline.Nanos(l.Time), end) // never before the records
		if !w.any {
			begin = ts
		}
		end = ts
		body = appendLost(body, l, ts)
		total += l.Records
	}
	f, err := timeline.CreateFile(filepath.Join(w.dir, "stream_gprobes"))
	if err != nil {
		return err
	}
	// an empty packet with none discarded, then the counts: a reader
	// reports the difference, total, as discarded between the two (a
	// first packet alone would leave the count unknown to babeltrace2)
	id := uint64(len(w.order))
	p := packet(w.uuid, streamLost, id, 0, begin, begin, 0, true, nil, nil)
	p = append(p, packet(w.uuid, streamLost, id, 1, begin, end, total, true, nil, body)...)
	return f.Append(p)
}

// packet assembles one packet: header, context, events.
func packet(uuid [16]byte, class uint32, instance, seq, begin, end, discarded uint64, withDiscarded bool, ctxTail, events []byte) []byte {
	const fixed = 4 + 16 + 4 + 8 + 5*8 // header, then the context's fixed fields
	size := fixed + len(ctxTail) + len(events)
	if withDiscarded {
		size += 8
	}
	b := make([]byte, 0, size)
	b = binary.LittleEndian.AppendUint32(b, magic)
	b = append(b, uuid[:]...)
	b = binary.LittleEndian.AppendUint32(b, class)
	b = binary.LittleEndian.AppendUint64(b, instance)
	b = binary.LittleEndian.AppendUint64(b, begin)
	b = binary.LittleEndian.AppendUint64(b, end)
	b = binary.LittleEndian.AppendUint64(b, uint64(size)*8) // content_size
	b = binary.LittleEndian.AppendUint64(b, uint64(size)*8) // packet_size
	b = binary.LittleEndian.AppendUint64(b, seq)
	if withDiscarded {
		b = binary.LittleEndian.AppendUint64(b, discarded)
	}
	b = append(b, ctxTail...)
	return append(b, events...)
}

// appendEvent appends one record's event: header, context, payload.
func appendEvent(b []byte, ev timeline.Event, ts uint64) []byte {
	r := ev.Record
	id := uint32(evLog)
	switch {
	case r.Kind == probe.RecordException:
		id = evException
	case ev.Type == timeline.Begin:
		id = evEntry
	case ev.Type == timeline.End:
		id = evReturn
	case r.Kind == probe.RecordTrace:
		id = evTrace
	}
	b = binary.LittleEndian.AppendUint32(b, id)
	b = binary.LittleEndian.AppendUint64(b, ts)
	b = binary.LittleEndian.AppendUint32(b, uint32(int32(r.Pid)))
	b = binary.LittleEndian.AppendUint32(b, uint32(int32(r.Tid)))
	b = binary.LittleEndian.AppendUint32(b, uint32(int32(r.CPU)))
	if id == evException {
		b = appendString(b, r.Module)
		b = binary.LittleEndian.AppendUint16(b, r.Major)
		b = binary.LittleEndian.AppendUint16(b, r.Minor)
		b = appendString(b, r.Location)
		b = appendOptional(b, r.Probe)
		b = binary.LittleEndian.AppendUint64(b, r.Address)
		b = appendString(b, r.Exception)
		b = binary.LittleEndian.AppendUint32(b, r.PC)
		return appendOptional(b, r.Line)
	}
	b = appendString(b, string(r.Kind))
	b = appendString(b, r.Module)
	b = binary.LittleEndian.AppendUint16(b, r.Major)
	b = binary.LittleEndian.AppendUint16(b, r.Minor)
	b = appendString(b, r.Location)
	b = appendOptional(b, r.Probe)
	b = binary.LittleEndian.AppendUint64(b, r.Address)
	b = append(b, r.Exit)
	t := byte(0)
	if r.Truncated {
		t = 1
	}
	b = append(b, t)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Data)))
	b = append(b, r.Data...)
	b = appendOptional(b, r.Dump)
	b = appendOptional(b, r.Debugger)
	return appendOptional(b, probe.StacksText(r.Stacks))
}

func appendLost(b []byte, l timeline.Loss, ts uint64) []byte {
	b = binary.LittleEndian.AppendUint32(b, evLost)
	b = binary.LittleEndian.AppendUint64(b, ts)
	b = appendOptional(b, l.Target)
	b = appendOptional(b, l.Module)
	b = binary.LittleEndian.AppendUint32(b, uint32(int32(l.Minor)))
	b = appendOptional(b, l.Location)
	b = binary.LittleEndian.AppendUint64(b, l.Records)
	return appendString(b, l.Why)
}

// appendString appends s as a CTF string: UTF-8, NUL-terminated. A NUL in
// s would end it early, so it is dropped (names and DPDF lines have none).
func appendString(b []byte, s string) []byte {
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "")
	}
	b = append(b, s...)
	return append(b, 0)
}

// appendOptional appends a string that may be empty as a sequence of
// none or one string (uint8_t has_NAME; string NAME[has_NAME]): never an
// empty CTF string, which babeltrace2 before 2.0.5 shows with the value of
// the same field of an earlier event of the class.
func appendOptional(b []byte, s string) []byte {
	if s == "" {
		return append(b, 0)
	}
	return appendString(append(b, 1), s)
}

// metadata is the trace's TSDL description.
func (w *Writer) metadata() string {
	u := w.uuid
	uuid := fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
	return strings.NewReplacer("@UUID@", uuid, "@HOSTNAME@", tsdlString(w.hostname), "\t\tRECORD\n", recordFields).Replace(metadataText)
}

// recordFields are the payload of a record's event (log, trace, entry,
// return), in the order appendEvent writes them.
const recordFields = `		string kind;
		string module;
		uint16_t major;
		uint16_t minor;
		string location;
		uint8_t has_probe;
		string probe[has_probe];
		xuint64_t address;
		uint8_t exit;
		uint8_t truncated;
		uint32_t data_len;
		xuint8_t data[data_len];
		uint8_t has_dump;
		string dump[has_dump];
		uint8_t has_debugger;
		string debugger[has_debugger];
		uint8_t has_stacks;
		string stacks[has_stacks];
`

// tsdlString escapes s for a TSDL string literal.
func tsdlString(s string) string {
	var sb strings.Builder
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			sb.WriteByte('\\')
			sb.WriteRune(c)
		case c < 0x20 || c == 0x7f:
		default:
			sb.WriteRune(c)
		}
	}
	return sb.String()
}

const metadataText = `/* CTF 1.8 */

/* gprobes' committed records; docs/records.md says what each field is. */

typealias integer { size = 8; align = 8; signed = false; } := uint8_t;
typealias integer { size = 16; align = 8; signed = false; } := uint16_t;
typealias integer { size = 32; align = 8; signed = false; } := uint32_t;
typealias integer { size = 64; align = 8; signed = false; } := uint64_t;
typealias integer { size = 32; align = 8; signed = true; } := int32_t;
typealias integer { size = 8; align = 8; signed = false; base = 16; } := xuint8_t;
typealias integer { size = 32; align = 8; signed = false; base = 16; } := xuint32_t;
typealias integer { size = 64; align = 8; signed = false; base = 16; } := xuint64_t;

trace {
	major = 1;
	minor = 8;
	uuid = "@UUID@";
	byte_order = le;
	packet.header := struct {
		uint32_t magic;
		uint8_t uuid[16];
		uint32_t stream_id;
		uint64_t stream_instance_id;
	};
};

env {
	domain = "gprobes";
	tracer_name = "gprobes";
	hostname = "@HOSTNAME@";
};

clock {
	name = "gprobes";
	uuid = "@UUID@";
	description = "wall-clock time of the records, nanoseconds since the Unix epoch";
	freq = 1000000000;
	offset_s = 0;
	offset = 0;
	precision = 0;
	absolute = TRUE;
};

typealias integer { size = 64; align = 8; signed = false; map = clock.gprobes.value; } := uint64_clock_t;

/* a thread's records: a process's thread, a kernel's task, a guest's vCPU */
stream {
	id = 0;
	packet.context := struct {
		uint64_clock_t timestamp_begin;
		uint64_clock_t timestamp_end;
		uint64_t content_size;
		uint64_t packet_size;
		uint64_t packet_seq_num;
		string target;
	};
	event.header := struct {
		uint32_t id;
		uint64_clock_t timestamp;
	};
	event.context := struct {
		int32_t pid;
		int32_t tid;
		int32_t cpu;
	};
};

/* the counts of records lost before they could be written here */
stream {
	id = 1;
	packet.context := struct {
		uint64_clock_t timestamp_begin;
		uint64_clock_t timestamp_end;
		uint64_t content_size;
		uint64_t packet_size;
		uint64_t packet_seq_num;
		uint64_t events_discarded;
	};
	event.header := struct {
		uint32_t id;
		uint64_clock_t timestamp;
	};
};
event {
	name = "gprobes:log";
	id = 0;
	stream_id = 0;
	fields := struct {
		RECORD
	};
};

event {
	name = "gprobes:trace";
	id = 1;
	stream_id = 0;
	fields := struct {
		RECORD
	};
};

event {
	name = "gprobes:exception";
	id = 2;
	stream_id = 0;
	fields := struct {
		string module;
		uint16_t major;
		uint16_t minor;
		string location;
		uint8_t has_probe;
		string probe[has_probe];
		xuint64_t address;
		string exception;
		xuint32_t pc;
		uint8_t has_line;
		string line[has_line];
	};
};

event {
	name = "gprobes:entry";
	id = 3;
	stream_id = 0;
	fields := struct {
		RECORD
	};
};

event {
	name = "gprobes:return";
	id = 4;
	stream_id = 0;
	fields := struct {
		RECORD
	};
};

event {
	name = "gprobes:lost";
	id = 0;
	stream_id = 1;
	fields := struct {
		uint8_t has_target;
		string target[has_target];
		uint8_t has_module;
		string module[has_module];
		int32_t minor;
		uint8_t has_location;
		string location[has_location];
		uint64_t records;
		string why;
	};
};
`
