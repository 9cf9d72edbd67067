// Package perfetto writes committed records as a Perfetto trace: a
// protobuf Trace (repeated TracePacket packet = 1) of TrackEvents, encoded
// with protowire from the schema Perfetto documents
// (protos/perfetto/trace/trace_packet.proto, track_event/track_event.proto,
// track_descriptor.proto, process_descriptor.proto,
// thread_descriptor.proto, counter_descriptor.proto, debug_annotation.proto,
// interned_data/interned_data.proto, clock_snapshot.proto). Only the
// field numbers are taken from there; no generated code.
//
// Design note. Each thread is a track and a packet sequence of its own
// (trusted_packet_sequence_id 2, 3, ...), as the Perfetto SDK has one per
// writing thread: its first packet describes the track (and its process's,
// the first time) and clears the sequence's incremental state
// (SEQ_INCREMENTAL_STATE_CLEARED); every later packet interns event names,
// categories and debug-annotation names on the sequence and says it needs
// that state (SEQ_NEEDS_INCREMENTAL_STATE). A process target's threads
// are thread tracks (ThreadDescriptor) under a process track
// (ProcessDescriptor); a kernel's or a guest's are tracks named "pid P tid
// T" under a track named after the target, since their pids are not this
// machine's processes' (a guest's) or would merge with them (the
// kernel's). Sequence 1 is gprobes' own: a clock snapshot (the records'
// times are wall-clock nanoseconds, written as the trace's clock), the
// "gprobes" track with a "records lost" instant per count, and the
// "gprobes: records lost" counter track.
//
// Records are events: an instant, or the begin and end of a slice for an
// entry and return record paired by package timeline; the record's fields
// are debug annotations (a slice's end ones under "return.", since
// Perfetto merges the begin's and end's). Read decodes what Writer writes,
// field by field, for tests and tools.
package perfetto
