package gdbtarget_test

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/arch/x86/x86asm"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/gdbtarget"
	"github.com/gprobes/gprobes/linuxkernel"
	"github.com/gprobes/gprobes/probe"
)

// kstacks logs the kernel stack at getppid's, write's and nanosleep's
// entries, each record naming its process; probe 4 reads address 0 at
// getppid's: its exception records carry the stack (autostacktrace).
const kstacks = `name = vmlinux
modtype = kernel
offset = __x64_sys_getppid
minor = 1
push pid
log 1
log kstack
exit 1
offset = ksys_write
minor = 2
push pid
log 1
log kstack,8
exit 1
offset = do_nanosleep
minor = 3
push pid
log 1
log kstack
exit 1
offset = __x64_sys_getppid
minor = 4
autostacktrace = yes
push d,0
push mrf,8
log 1
exit 1
`

// Kernel stacks of a guest under KASLR, unwound with the vmlinux's ORC
// tables through the stub: a system call's frames down to the entry code
// (do_syscall_64, entry_SYSCALL_64...), where the user's pt_regs ends the
// kernel stack; each return address follows a call instruction in the
// vmlinux's code, a direct call going to the frame below; and the frames
// of a sleeping process equal, name and offset, what the guest kernel's
// own unwinder shows in /proc/PID/stack.
func TestGuestKernelStack(t *testing.T) {
	g := boot(t, true)
	g.attach(gdbtarget.Options{})
	var slide uint64
	g.eng.WithTarget(func(tg engine.Target) error {
		slide, _ = tg.OS().(*linuxkernel.Guest).K.Slide()
		return nil
	})
	if slide == 0 {
		t.Fatal("the guest booted without a KASLR slide")
	}
	g.insert(compile(t, kstacks))
	code := vmlinuxText(t, filepath.Join(g.art, "vmlinux"))

	pid, out := g.run("gpwork counts 3")
	if !strings.Contains(out, "GPWORK done getppid 3") {
		t.Fatalf("the workload did not finish:\n%s", out)
	}
	check := func(what string, st probe.Stack, max int, want ...string) {
		t.Helper()
		fr := st.Frames
		if st.Kind != "kernel" || len(fr) == 0 || len(fr) > max {
			t.Fatalf("%s: stack %q of %d frames: %v", what, st.Kind, len(fr), fr)
		}
		var names []string
		for _, f := range fr {
			names = append(names, f.Function)
			if f.Module != "vmlinux" || f.Function == "" {
				t.Errorf("%s: frame %v not named in vmlinux (all: %v)", what, f, fr)
			}
		}
		for i, w := range want {
			if i >= len(names) || !strings.HasPrefix(names[i], w) {
				t.Errorf("%s: frames %v, want %v first", what, fr, want)
				break
			}
		}
		checkCalls(t, what, code, slide, fr)
	}
	// 3 of gpwork's, and the shell's before it execs gpwork in the
	// same process
	getppid := g.of(pid, 1)
	if len(getppid) < 3 {
		t.Fatalf("getppid: %d records of pid %d, want 3 at least", len(getppid), pid)
	}
	for _, r := range getppid {
		if len(r.Stacks) != 1 {
			t.Fatalf("getppid: a record with %d stacks", len(r.Stacks))
		}
		// the system call's stack ends at the entry code: the user's
		// registers saved there end the kernel stack
		check("getppid", r.Stacks[0], 4, "__x64_sys_getppid")
		fr := r.Stacks[0].Frames
		if !hasFrame(r.Stacks[0], "do_syscall_64") || !strings.HasPrefix(fr[len(fr)-1].Function, "entry_SYSCALL_64") {
			t.Errorf("getppid: frames %v, want do_syscall_64 and entry_SYSCALL_64 last", fr)
		}
		if f := r.Stacks[0].Frames[0]; f.Offset != 0 {
			t.Errorf("getppid: the hit's frame is %v, want the function's first byte", f)
		}
	}
	t.Logf("getppid: %v", getppid[0].Stacks[0].Frames)
	var exc []engine.Record
	g.mu.Lock()
	for _, r := range g.recs {
		if r.Minor == 4 {
			exc = append(exc, r)
		}
	}
	g.mu.Unlock()
	if len(exc) < 3 {
		t.Errorf("autostacktrace: %d records of probe 4, want 3 at least (gpwork's getppid calls)", len(exc))
	}
	for _, r := range exc {
		if r.Kind != probe.RecordException || len(r.Stacks) != 1 {
			t.Fatalf("autostacktrace: a %s record with %d stacks", r.Kind, len(r.Stacks))
		}
		check("autostacktrace", r.Stacks[0], 4, "__x64_sys_getppid")
		if fr := r.Stacks[0].Frames; !strings.HasPrefix(fr[len(fr)-1].Function, "entry_SYSCALL_64") {
			t.Errorf("autostacktrace: frames %v, want entry_SYSCALL_64 last", fr)
		}
	}
	writes := g.of(pid, 2)
	if len(writes) < 3 {
		t.Fatalf("write: %d records of pid %d, want 3 at least", len(writes), pid)
	}
	for _, r := range writes {
		check("write", r.Stacks[0], 8, "ksys_write")
		if !hasFrame(r.Stacks[0], "do_syscall_64") || !hasFrame(r.Stacks[0], "entry_SYSCALL_64") {
			t.Errorf("write: no system call entry in %v", r.Stacks[0].Frames)
		}
	}
	t.Logf("write: %v", writes[0].Stacks[0].Frames)

	// a sleeping process: its stack at do_nanosleep's entry, and the
	// guest kernel's own unwinder on the same task while it sleeps
	// there: the same callers at the same return addresses
	out, rc, err := g.vm.Run("sleep 600 >/dev/null 2>&1 & echo BGPID $!", time.Minute)
	m := regexp.MustCompile(`BGPID (\d+)`).FindStringSubmatch(out)
	if err != nil || rc != 0 || m == nil {
		t.Fatalf("sleep: rc %d %v\n%s", rc, err, out)
	}
	spid, _ := strconv.Atoi(m[1])
	var sleeps []engine.Record
	deadline := time.Now().Add(2 * time.Minute)
	for len(sleeps) == 0 && time.Now().Before(deadline) {
		sleeps = g.of(spid, 3)
		if len(sleeps) == 0 {
			time.Sleep(200 * time.Millisecond) // wait for the record's commit
		}
	}
	if len(sleeps) != 1 {
		t.Fatalf("do_nanosleep: %d records of the sleep (pid %d) in 2 minutes", len(sleeps), spid)
	}
	ours := sleeps[0].Stacks[0]
	check("nanosleep", ours, 16, "do_nanosleep")
	var mine []string
	for _, f := range ours.Frames[1:] {
		mine = append(mine, fmt.Sprintf("%s+%#x", f.Function, f.Offset))
	}
	if len(mine) == 0 {
		t.Fatalf("nanosleep: no caller of do_nanosleep in %v", ours.Frames)
	}
	// /proc/PID/stack of a task not running leaves out the scheduler's
	// functions (__sched ones: schedule, do_nanosleep itself): it starts
	// at do_nanosleep's caller once the task sleeps
	var proc []string
	for range 100 {
		out, rc, err = g.vm.Run(fmt.Sprintf("cat /proc/%d/stack", spid), time.Minute)
		if err != nil || rc != 0 {
			t.Fatalf("/proc/%d/stack: rc %d %v\n%s", spid, rc, err, out)
		}
		if proc = procStack(out); slices.Contains(proc, mine[0]) {
			break
		}
	}
	t.Logf("ours: %v\nthe guest's /proc/%d/stack: %q", ours.Frames, spid, proc)
	i := slices.Index(proc, mine[0])
	if i < 0 || !slices.Equal(proc[i:], mine) {
		t.Errorf("the callers of do_nanosleep:\n ours  %q\n guest %q (/proc/%d/stack)", mine, proc, spid)
	}
	for _, f := range proc[:max(i, 0)] {
		if !strings.Contains(f, "sleep") && !strings.Contains(f, "schedule") {
			t.Errorf("/proc/%d/stack has %s above do_nanosleep's caller, which our stack lacks", spid, f)
		}
	}
	g.vm.Run(fmt.Sprintf("kill %d", spid), time.Minute)
}

func hasFrame(st probe.Stack, prefix string) bool {
	for _, f := range st.Frames {
		if strings.HasPrefix(f.Function, prefix) {
			return true
		}
	}
	return false
}

// procStack reads /proc/PID/stack: "[<0>] do_nanosleep+0x6a/0x170" per
// line, as "do_nanosleep+0x6a".
func procStack(out string) []string {
	var fr []string
	for _, m := range regexp.MustCompile(`(?m)^\[<[0-9a-f]+>\] (\S+)\+(0x[0-9a-f]+)/0x[0-9a-f]+`).FindAllStringSubmatch(out, -1) {
		fr = append(fr, m[1]+"+"+m[2])
	}
	return fr
}

// checkCalls checks each return address of the image against the
// vmlinux's code (checkCall); the frame below's function is where a
// direct call goes when that frame is the image's too.
func checkCalls(t *testing.T, what string, code elfText, slide uint64, fr []probe.Frame) {
	t.Helper()
	for i := 1; i < len(fr); i++ {
		if fr[i].Module != "vmlinux" || strings.HasPrefix(fr[i-1].Function, "asm_") {
			continue // the code an interrupt entry (asm_*) interrupted: no call before it
		}
		if i == len(fr)-1 && strings.HasPrefix(fr[i].Function, "secondary_startup_64") {
			continue // the head code's far return into C pushes a return address for unwinders (.Lafter_lret) that no call put there
		}
		var callee uint64
		if fr[i-1].Module == "vmlinux" {
			callee = uint64(fr[i-1].Address) - fr[i-1].Offset - slide
		}
		checkCall(t, what, code, uint64(fr[i].Address)-slide, callee, fr)
	}
}

// Kernel stacks in interrupts: at hrtimer_interrupt, the timer's
// handler, which runs on the IRQ stack (reached with an indirect CFA from
// the task's stack) from an interrupt entry (asm_sysvec_apic_timer_interrupt,
// a pt_regs): the walk goes through the entry into the interrupted code,
// nested interrupts (a softirq interrupted) included, and ends where the
// task's stack ends (a kernel thread's ret_from_fork, the idle task's
// start, a system call's entry) or at the user's pt_regs of an interrupt
// of user code. Each return address but the interrupted code's follows a
// call in the vmlinux's code.
func TestGuestKernelStackInterrupt(t *testing.T) {
	g := boot(t, true)
	g.attach(gdbtarget.Options{})
	var slide uint64
	g.eng.WithTarget(func(tg engine.Target) error {
		slide, _ = tg.OS().(*linuxkernel.Guest).K.Slide()
		return nil
	})
	g.insert(compile(t, `name = vmlinux
modtype = kernel
offset = hrtimer_interrupt
minor = 1
max hits = 6
log kstack,40
exit 1
`))
	code := vmlinuxText(t, filepath.Join(g.art, "vmlinux"))
	var recs []engine.Record
	for deadline := time.Now().Add(3 * time.Minute); len(recs) < 6 && time.Now().Before(deadline); {
		g.vm.Run("sleep 1", time.Minute) // the guest runs on: timer interrupts
		g.mu.Lock()
		recs = append(recs[:0], g.recs...)
		g.mu.Unlock()
	}
	if len(recs) != 6 {
		t.Fatalf("%d records of hrtimer_interrupt in 3 minutes, want 6 (max hits)", len(recs))
	}
	ends := []string{"ret_from_fork", "entry_SYSCALL_64", "secondary_startup_64", "x86_64_start_", "start_kernel", "asm_"}
	for _, r := range recs {
		fr := r.Stacks[0].Frames
		t.Logf("%v", fr)
		if fr[0].Function != "hrtimer_interrupt" || fr[0].Offset != 0 {
			t.Errorf("the hit's frame is %v", fr[0])
		}
		entry := -1
		for i, f := range fr {
			if f.Module != "vmlinux" || f.Function == "" {
				t.Errorf("frame %v not named in vmlinux", f)
			}
			if entry < 0 && strings.HasPrefix(f.Function, "asm_sysvec_apic_timer_interrupt") {
				entry = i
			}
		}
		if entry < 0 {
			t.Errorf("no interrupt entry in %v", fr)
		}
		last := fr[len(fr)-1].Function
		if !slices.ContainsFunc(ends, func(e string) bool { return strings.HasPrefix(last, e) }) || len(fr) == 40 {
			t.Errorf("the walk ended at %s (%d frames), not at the end of a stack: %v", last, len(fr), fr)
		}
		checkCalls(t, "hrtimer_interrupt", code, slide, fr)
	}
}

// A kernel stack through modules' code: at rmd160_final in rmd160.ko,
// reached from an AF_ALG socket's recvmsg in algif_hash.ko. The walk
// goes through both modules with their ORC tables read from guest
// memory (struct module's arch) and ends at the system call's entry; each
// frame is named in its module, the image's return addresses checked
// against the vmlinux's code.
func TestGuestKernelStackModules(t *testing.T) {
	g := boot(t, true)
	g.attach(gdbtarget.Options{})
	if err := g.eng.Release(); err != nil {
		t.Fatal(err)
	}
	if out, rc, err := g.vm.Run("modprobe algif_hash && modprobe rmd160", 5*time.Minute); err != nil || rc != 0 {
		t.Fatalf("modprobe: rc %d %v\n%s", rc, err, out)
	}
	var slide uint64
	g.eng.WithTarget(func(tg engine.Target) error {
		slide, _ = tg.OS().(*linuxkernel.Guest).K.Slide()
		return nil
	})
	g.insert(compile(t, `name = rmd160
modtype = kernel
offset = rmd160_final
minor = 1
push pid
log 1
log kstack,40
exit 1
`))
	code := vmlinuxText(t, filepath.Join(g.art, "vmlinux"))
	pid, out := g.run("gpwork hash rmd160 3")
	if !strings.Contains(out, "GPWORK hash rmd160 3 ") {
		t.Fatalf("gpwork hash:\n%s", out)
	}
	recs := g.of(pid, 1)
	if len(recs) != 3 {
		t.Fatalf("%d records of pid %d, want 3", len(recs), pid)
	}
	for _, r := range recs {
		fr := r.Stacks[0].Frames
		t.Logf("rmd160_final: %v", fr)
		mods := map[string]bool{}
		for _, f := range fr {
			mods[f.Module] = true
			if f.Function == "" {
				t.Errorf("frame %v not named", f)
			}
		}
		if fr[0].Function != "rmd160_final" || fr[0].Module != "rmd160" || fr[0].Offset != 0 {
			t.Errorf("the hit's frame is %v", fr[0])
		}
		if !mods["algif_hash"] || !mods["vmlinux"] {
			t.Errorf("frames in %v, want algif_hash's and vmlinux's too", mods)
		}
		if !hasFrame(r.Stacks[0], "do_syscall_64") || !strings.HasPrefix(fr[len(fr)-1].Function, "entry_SYSCALL_64") {
			t.Errorf("the walk did not reach the system call's entry: %v", fr)
		}
		checkCalls(t, "rmd160_final", code, slide, fr)
	}
}

// elfText is the vmlinux's code, at link-time addresses: each
// executable section (.text, and .init.text, freed after boot but still
// under the stack of the idle task that start_kernel became), and where
// pv_ops lies (the paravirt calls' table).
type elfText struct {
	secs  []elfSec
	pvOps [2]uint64
}

type elfSec struct {
	addr uint64
	b    []byte
}

func vmlinuxText(t *testing.T, path string) elfText {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var code elfText
	for _, s := range f.Sections {
		if s.Type != elf.SHT_PROGBITS || s.Flags&elf.SHF_EXECINSTR == 0 {
			continue
		}
		b, err := s.Data()
		if err != nil {
			t.Fatal(err)
		}
		code.secs = append(code.secs, elfSec{s.Addr, b})
	}
	if len(code.secs) == 0 {
		t.Fatalf("%s has no code", path)
	}
	// The lab's vmlinux has no symbol table: pv_ops ends where the next
	// symbol of System.map begins.
	sysmap, err := os.ReadFile(filepath.Join(filepath.Dir(path), "System.map"))
	if err != nil {
		t.Fatal(err)
	}
	var addrs []uint64
	for _, l := range strings.Split(string(sysmap), "\n") {
		var a uint64
		var typ, name string
		if n, _ := fmt.Sscanf(l, "%x %s %s", &a, &typ, &name); n != 3 {
			continue
		}
		addrs = append(addrs, a)
		if name == "pv_ops" {
			code.pvOps[0] = a
		}
	}
	slices.Sort(addrs)
	if i := sort.Search(len(addrs), func(i int) bool { return addrs[i] > code.pvOps[0] }); code.pvOps[0] == 0 || i == len(addrs) {
		t.Fatalf("no pv_ops in %s/System.map", filepath.Dir(path))
	} else {
		code.pvOps[1] = addrs[i]
	}
	return code
}

// around returns the code from addr-before to addr+after, or nil when
// that is not all in one section.
func (c elfText) around(addr uint64, before, after int) []byte {
	for _, s := range c.secs {
		if addr >= s.addr+uint64(before) && addr+uint64(after) <= s.addr+uint64(len(s.b)) {
			off := int(addr - s.addr)
			return s.b[off-before : off+after]
		}
	}
	return nil
}

// checkCall checks that return address ret (link-time) follows a call in
// the vmlinux's code: a call rel32 going to callee (the frame below's
// function; or a retpoline thunk, the compiled form of an indirect call),
// an indirect call (ff /2), or a paravirt call: in the file 'call
// *pv_ops+N(%rip)' (6 bytes), which the kernel patches at boot into a
// direct call (5 bytes) and a nop, so that the return address is one
// byte short of the file's instruction's end.
func checkCall(t *testing.T, what string, code elfText, ret, callee uint64, fr []probe.Frame) {
	t.Helper()
	b := code.around(ret, 8, 1)
	if b == nil {
		t.Errorf("%s: return address %#x not in the vmlinux's code (frames %v)", what, ret, fr)
		return
	}
	for n := 2; n <= 7; n++ {
		in, err := x86asm.Decode(b[8-n:8], 64)
		if err != nil || in.Len != n || in.Op != x86asm.CALL {
			continue
		}
		if rel, ok := in.Args[0].(x86asm.Rel); ok {
			to := ret + uint64(int64(rel))
			if callee != 0 && to != callee && !isThunk(to, code) && !jumpsTo(to, callee, code) {
				t.Errorf("%s: the call before %#x goes to %#x, not to the frame below at %#x nor to code that jumps there (frames %v)", what, ret, to, callee, fr)
			}
		}
		return
	}
	if in, err := x86asm.Decode(b[3:9], 64); err == nil && in.Len == 6 && in.Op == x86asm.CALL {
		if m, ok := in.Args[0].(x86asm.Mem); ok && m.Base == x86asm.RIP {
			slot := ret + 1 + uint64(int64(m.Disp))
			if slot >= code.pvOps[0] && slot < code.pvOps[1] {
				return
			}
		}
	}
	t.Errorf("%s: no call instruction ends at %#x: % x (frames %v)", what, ret, b[:8], fr)
}

// jumpsTo says whether the code at fn jumps or calls to callee directly
// within its first 64 KiB: fn tail-called the frame below (a system
// call's dispatch, x64_sys_call, is a switch of such jumps).
func jumpsTo(fn, callee uint64, code elfText) bool {
	for off := 0; off < 0x10000; {
		b := code.around(fn+uint64(off), 0, 16)
		if b == nil {
			return false
		}
		in, err := x86asm.Decode(b, 64)
		if err != nil {
			off++
			continue
		}
		if rel, ok := in.Args[0].(x86asm.Rel); ok && (in.Op == x86asm.JMP || in.Op == x86asm.CALL) {
			if fn+uint64(off+in.Len)+uint64(int64(rel)) == callee {
				return true
			}
		}
		off += in.Len
	}
	return false
}

// isThunk says whether to is a retpoline thunk (__x86_indirect_thunk_*):
// 'lfence; jmp *%reg', 'call; pause...' or, patched, 'jmp *%reg'.
func isThunk(to uint64, code elfText) bool {
	b := code.around(to, 0, 16)
	if b == nil {
		return false
	}
	in, err := x86asm.Decode(b, 64)
	return err == nil && (in.Op == x86asm.CALL || in.Op == x86asm.JMP || in.Op == x86asm.LFENCE)
}

// With only System.map among the symbols (no vmlinux, so no ORC
// tables), a probe that logs a kernel stack, one with autostacktrace =
// yes and one that logs a user stack are refused at insert, each with
// its reason; the module's other probe goes in and counts.
func TestGuestKernelStackRefused(t *testing.T) {
	g := boot(t, false)
	g.attach(gdbtarget.Options{Options: linuxkernel.Options{Symbols: []string{filepath.Join(g.art, "System.map")}}})
	infos, err := g.eng.Insert(compile(t, `name = vmlinux
modtype = kernel
vars = 1
offset = __x64_sys_getppid
minor = 1
log kstack
exit 1
offset = __x64_sys_getppid
minor = 2
autostacktrace = yes
push d,0
push mrf,8
log 1
exit 1
offset = __x64_sys_getppid
minor = 3
log ustack
exit 1
offset = __x64_sys_getppid
minor = 4
inc lv,0
exit 0
`), engine.InsertNew)
	if err != nil {
		t.Fatal(err)
	}
	const need = "log kstack on a guest unwinds its kernel stack with the ORC tables of the guest's vmlinux (.orc_unwind_ip, .orc_unwind; a kernel built with CONFIG_UNWINDER_ORC), and no file given with --symbols is an ELF vmlinux (given: System.map): give the guest's vmlinux too"
	want := map[uint16]string{
		1: "log kstack (guest.dpdf:6:1): " + need,
		2: "autostacktrace = yes: " + need + "; its exception records would carry no stack",
		3: "log ustack (guest.dpdf:17:1): a guest's user stacks are not unwound",
	}
	for _, p := range infos {
		w, refused := want[p.Minor]
		switch {
		case refused && (p.State != engine.StateRefused || !strings.HasPrefix(p.Reason, w)):
			t.Errorf("probe %d: %s %q, want refused %q", p.Minor, p.State, p.Reason, w)
		case !refused && p.State != engine.StateActive:
			t.Errorf("probe %d: %s %q, want active", p.Minor, p.State, p.Reason)
		}
	}
	if err := g.eng.Release(); err != nil {
		t.Fatal(err)
	}
	g.run("gpwork counts 2")
	if lv, _, err := g.eng.Vars("vmlinux", false); err != nil || lv[0] < 2 {
		t.Errorf("the other probe: lv %v %v, want 2 hits at least", lv, err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.recs) != 0 {
		t.Errorf("refused probes made %d records", len(g.recs))
	}
}
