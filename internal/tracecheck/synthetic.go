package tracecheck

import (
	"fmt"
	"time"

	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/timeline"
)

// Synthetic writes a set of made-up records through a Builder to w: three
// targets (a process with two threads, the kernel, a guest), nested and
// recursive slices, an unreturned entry, exceptions, every optional field,
// empty and long data, records out of order, and enough of them for
// several packets; then two losses. It returns the Tee that saw them.
func Synthetic(w timeline.Writer) *Tee {
	tee := &Tee{W: w}
	b := timeline.NewBuilder(tee)
	b.Returns("/bin/app", "work")
	b.Returns("vmlinux", "__x64_sys_getppid")
	t0 := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	at := func(ns int) time.Time { return t0.Add(time.Duration(ns) * time.Microsecond) }
	app := func(tid, ns int, kindName, loc string, kind probe.RecordKind, data []byte) *timeline.Record {
		return &timeline.Record{Target: "pid:100", Record: probe.Record{Time: at(ns), Kind: kind, Module: "/bin/app", Major: 1, Minor: uint16(len(loc)),
			Location: loc, Probe: kindName, Address: 0x401000 + uint64(len(loc)), Pid: 100, Tid: tid, CPU: tid - 100, Exit: 1, Data: data}}
	}
	var recs []*timeline.Record
	for i := 0; i < 2000; i++ {
		tid := 100 + i%2
		ns := i * 10
		w := []byte(fmt.Sprintf("call %04d", i))
		recs = append(recs,
			app(tid, ns, "", "work", "log", w),
			app(tid, ns+1, "", "work", "trace", nil), // recursion
			app(tid, ns+2, "", "inner", "trace", []byte{byte(i)}),
			app(tid, ns+3, "retprobe", "work", "log", []byte{1, 2, 3, 4, 5, 6, 7, 8}),
			app(tid, ns+4, "retprobe", "work", "trace", make([]byte, 64)),
		)
		if i%100 == 0 {
			x := app(tid, ns+5, "", "inner", "exception", nil)
			x.Exception, x.PC, x.Line, x.Exit = "divide-by-zero", 0x1c, "app.dpdf:12:1", 0
			recs = append(recs, x)
			d := app(tid, ns+6, "", "dumpit", "log", []byte("dump"))
			d.Exit, d.Dump, d.Truncated = 3, "/var/lib/gprobes/dumps/core.100.1", true
			recs = append(recs, d)
			e := app(tid, ns+7, "", "work", "log", nil) // never returns
			recs = append(recs, e)
			// log ustack twice: named frames, a frame with its module
			// only, one with its address only; a stack with no frame
			st := app(tid, ns+8, "", "stacked", "log", make([]byte, 2*4*8))
			st.Stacks = []probe.Stack{
				{Kind: "user", Frames: []probe.Frame{{Address: 0x401000, Function: "leaf", Module: "/bin/app"}, {Address: 0x40104c, Function: "fact", Offset: 0x4c, Module: "/bin/app"},
					{Address: 0x7f0000001234, Module: "/lib/x86_64-linux-gnu/libc.so.6 (deleted)"}, {Address: 0x7ffff000}}},
				{Kind: "user", Frames: []probe.Frame{}},
			}
			recs = append(recs, st)
		}
	}
	// commit order is not time order: swap neighbours here and there
	for i := 3; i+1 < len(recs); i += 7 {
		recs[i], recs[i+1] = recs[i+1], recs[i]
	}
	// the kernel: tasks, with a tracepoint and a function's calls
	for i := 0; i < 50; i++ {
		k := func(ns int, kindName, loc string) *timeline.Record {
			return &timeline.Record{Target: "kernel", Record: probe.Record{Time: at(ns), Kind: probe.RecordLog, Module: "vmlinux", Major: 3, Minor: 1,
				Location: loc, Probe: kindName, Address: 0xffffffff81000000, Pid: 200 + i%3, Tid: 300 + i%3, CPU: i % 4, Exit: 1, Data: []byte{byte(i), 0, 0, 0, 0, 0, 0, 0}}}
		}
		recs = append(recs, k(i*7, "tracepoint", "syscalls:sys_enter_getppid"), k(i*7+1, "", "__x64_sys_getppid"), k(i*7+2, "retprobe", "__x64_sys_getppid"))
		if i%10 == 0 {
			ks := k(i*7+3, "tracepoint", "syscalls:sys_enter_getppid")
			ks.Stacks = []probe.Stack{
				{Kind: "kernel", Frames: []probe.Frame{{Address: 0xffffffff81001234, Function: "do_syscall_64", Offset: 0x8f, Module: "vmlinux"}, {Address: 0xffffffffc0001000, Function: "mod_fn", Offset: 1, Module: "ext4"}}},
				{Kind: "user", Frames: []probe.Frame{{Address: 0x7f00000004f7, Function: "getppid", Offset: 7, Module: "/usr/lib/x86_64-linux-gnu/libc.so.6"}}},
			}
			recs = append(recs, ks)
		}
	}
	// a guest whose tasks are not known: its vCPUs' threads
	g := &timeline.Record{Target: "gdb:127.0.0.1:1234", Record: probe.Record{Time: at(5), Kind: probe.RecordTrace, Module: "vmlinux", Location: "schedule",
		Address: 0xffffffff81abcdef, Pid: 0, Tid: 2, CPU: 1, Exit: 2, Data: []byte{0xff}}}
	debug := &timeline.Record{Target: "gdb:127.0.0.1:1234", Record: probe.Record{Time: at(6), Kind: probe.RecordLog, Module: "vmlinux", Location: "schedule",
		Pid: 0, Tid: 2, CPU: 1, Exit: 4, Debugger: "gdb -ex 'target remote 127.0.0.1:1234'"}}
	recs = append(recs, g, debug)
	for _, r := range recs {
		b.Add(r)
	}
	b.Flush()
	b.Loss(timeline.Loss{Time: at(30000), Minor: -1, Records: 15854, Why: "not written to the daemon's log file: no space left on device"})
	b.Loss(timeline.Loss{Time: at(30001), Target: "pid:100", Module: "/bin/app", Minor: 4, Location: "work", Records: 3, Why: "lost in the process: its jump pads' ring was full"})
	return tee
}
