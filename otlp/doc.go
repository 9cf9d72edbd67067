// Package otlp exports the records a gprobes daemon commits as
// OpenTelemetry logs (OTLP over gRPC or HTTP), with the official Go SDK:
// gprobes daemon --otlp URL (docs/api.md, "OpenTelemetry").
//
// Two processes share the work. In the daemon, the Exporter's Export (on
// the probed thread's path) only puts the record, as its JSON line (as the log stream has it),
// in a ring in shared memory, or counts it dropped when the ring is full:
// no system call, no allocation, nothing that waits. The forwarder, a
// second gprobes the Exporter starts (gprobes otlp-forward, SCHED_IDLE),
// takes the records from the ring every 20 ms, turns them into
// OpenTelemetry log records and emits them into the SDK's BatchProcessor,
// which sends batches through the OTLP exporter, retrying as its retry
// settings say. What the SDK and the connection cost (some microseconds of
// CPU a record) is thus spent at the lowest priority, outside the daemon
// whose loops serve the probe hits; a forwarder that falls behind lets the
// ring fill, and the records that do not fit are counted, never waited
// for. Records sent are counted in the ring's header, those the receiver
// did not take once the retries ran out are reported by the forwarder to
// the daemon, per probe, on a pipe.
//
// The trap: Shutdown must be called, and given time (the daemon gives
// ShutdownTimeout): it is what tells the forwarder to send what it holds
// and counts what it could not; a daemon killed with SIGKILL takes the
// ring with it (its forwarder, reading a pipe the kernel closes, sends what
// it had taken and ends).
package otlp
