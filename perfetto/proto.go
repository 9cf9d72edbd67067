package perfetto

// Field numbers and enum values of Perfetto's trace protos (proto2,
// package perfetto.protos), as the .proto files in Perfetto's repository
// define them. Only what this package writes and reads.

// Trace
const fTracePacket = 1 // repeated TracePacket packet

// TracePacket
const (
	fPacketClockSnapshot    = 6  // ClockSnapshot clock_snapshot
	fPacketTimestamp        = 8  // uint64 timestamp
	fPacketSequenceID       = 10 // uint32 trusted_packet_sequence_id
	fPacketTrackEvent       = 11 // TrackEvent track_event
	fPacketInternedData     = 12 // InternedData interned_data
	fPacketSequenceFlags    = 13 // uint32 sequence_flags
	fPacketTrackDescriptor  = 60 // TrackDescriptor track_descriptor
	fPacketFirstOnSequence  = 87 // bool first_packet_on_sequence
	fPacketPreviousDropped  = 42 // uint32 previous_packet_dropped (read only)
	fPacketTimestampClockID = 58 // uint32 timestamp_clock_id (read only)
)

// TracePacket.SequenceFlags
const (
	SeqIncrementalStateCleared = 1 // SEQ_INCREMENTAL_STATE_CLEARED
	SeqNeedsIncrementalState   = 2 // SEQ_NEEDS_INCREMENTAL_STATE
)

// ClockSnapshot and ClockSnapshot.Clock
const (
	fClockSnapshotClocks  = 1 // repeated Clock clocks
	fClockSnapshotPrimary = 2 // BuiltinClock primary_trace_clock
	fClockID              = 1 // uint32 clock_id
	fClockTimestamp       = 2 // uint64 timestamp

	ClockRealtime = 1 // BuiltinClock REALTIME
	ClockBoottime = 6 // BuiltinClock BOOTTIME, the default trace clock
)

// TrackDescriptor
const (
	fTrackUUID    = 1 // uint64 uuid
	fTrackName    = 2 // string name
	fTrackProcess = 3 // ProcessDescriptor process
	fTrackThread  = 4 // ThreadDescriptor thread
	fTrackParent  = 5 // uint64 parent_uuid
	fTrackCounter = 8 // CounterDescriptor counter
)

// ProcessDescriptor, ThreadDescriptor, CounterDescriptor
const (
	fProcessPid  = 1 // int32 pid
	fProcessName = 6 // string process_name
	fThreadPid   = 1 // int32 pid
	fThreadTid   = 2 // int32 tid
	fThreadName  = 5 // string thread_name
	fCounterUnit = 3 // Unit unit

	UnitCount = 2 // CounterDescriptor.Unit UNIT_COUNT
)

// TrackEvent
const (
	fEventCategoryIIDs = 3  // repeated uint64 category_iids
	fEventAnnotations  = 4  // repeated DebugAnnotation debug_annotations
	fEventType         = 9  // Type type
	fEventNameIID      = 10 // uint64 name_iid
	fEventTrackUUID    = 11 // uint64 track_uuid
	fEventCategories   = 22 // repeated string categories
	fEventName         = 23 // string name
	fEventCounterValue = 30 // int64 counter_value
)

// TrackEvent.Type
const (
	TypeSliceBegin = 1 // TYPE_SLICE_BEGIN
	TypeSliceEnd   = 2 // TYPE_SLICE_END
	TypeInstant    = 3 // TYPE_INSTANT
	TypeCounter    = 4 // TYPE_COUNTER
)

// DebugAnnotation
const (
	fAnnotNameIID = 1  // uint64 name_iid
	fAnnotBool    = 2  // bool bool_value
	fAnnotUint    = 3  // uint64 uint_value
	fAnnotInt     = 4  // int64 int_value
	fAnnotString  = 6  // string string_value
	fAnnotPointer = 7  // uint64 pointer_value
	fAnnotName    = 10 // string name
)

// InternedData and its entries (EventCategory, EventName,
// DebugAnnotationName: iid = 1, name = 2)
const (
	fInternedCategories      = 1 // repeated EventCategory event_categories
	fInternedEventNames      = 2 // repeated EventName event_names
	fInternedAnnotationNames = 3 // repeated DebugAnnotationName debug_annotation_names
	fInternedIID             = 1
	fInternedName            = 2
)
