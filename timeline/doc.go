// Package timeline turns committed records into the events of a trace
// timeline, for the trace writers (packages ctf and perfetto): one track
// per thread (target, pid, tid: a process's thread, a kernel's task, a
// guest's vCPU when its task is not known), records in order of time on
// each, an entry record and the return record of the same call as the
// begin and end of a slice, and the counts of records that were lost.
//
// The pairing rule (Builder): on one thread, a record of an offset probe
// whose module and location are those of a return probe of the same module
// ("offset = write" and "retprobe = write") opens a call; a return record
// of that function closes the innermost call of it still open on the
// thread, and the two become a slice. Calls opened above it that never
// returned (a longjmp, a return probe whose program committed nothing) are
// given up as plain events, as the engine drops their instances. Entries
// left open at the end, and records of neither kind, are plain events.
//
// The trap: records reach a Builder in commit order, which is not the
// order of time on a thread (a jump pad's records come through its ring,
// later than the int3 route's). The Builder holds each thread's records
// for Window of record time before it writes them, so the writers see
// every thread in order of time; a record later than that is written
// after what its thread has written already (Builder.Stats counts them as
// late).
package timeline
