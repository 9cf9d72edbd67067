// Package ctf writes committed records as a CTF 1.8 trace (the Common
// Trace Format of diamon.org/ctf, which LTTng and GDB's tsave -ctf write
// and babeltrace2 and Trace Compass read): a directory with a TSDL
// metadata file in plain text and one binary stream file per thread.
//
// Design note. Every field is byte-aligned and little-endian, so a packet
// is written without bit packing: the packet header (magic 0xC1FC1FC1,
// the trace's UUID, the stream class id, the stream instance id), the
// packet context (begin and end timestamps, content and packet sizes in
// bits, a sequence number; the thread streams' target, the gprobes
// stream's events_discarded), then events, each an id, a 64-bit timestamp
// of one clock (nanoseconds since the Unix epoch: the records' wall-clock
// time), a context (pid, tid, cpu) on thread streams, and the payload.
// Packets are not padded: packet_size equals content_size.
//
// Stream class 0 is a thread's records: events gprobes:log, gprobes:trace,
// gprobes:exception, and gprobes:entry and gprobes:return for the two
// records of a slice (timeline's pairing rule). Stream class 1 has one
// stream, gprobes, with the counts of records lost before the trace was
// written: a gprobes:lost event each, and their sum as the packet's
// events_discarded, which babeltrace2 reports as discarded events.
//
// The trap: CTF readers require the timestamps of a stream to never go
// back. The writer gives an event that would go back (a record that came
// later than timeline's window) the timestamp of the event before it;
// its own time is lost from the trace.
package ctf
