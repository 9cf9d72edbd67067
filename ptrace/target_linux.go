package ptrace

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gprobes/gprobes/coredump"
	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/unwind"
)

// Target is the engine's view of a traced process tree.
type Target struct {
	t   *Tracer
	raw map[int]*unix.PtraceRegs // the last registers read of each thread, for the fields the engine does not keep
	// signals held back during an out-of-line step (Hold), then sent
	// again (Release) and waiting to get their siginfo back
	held, resent map[int][]*Siginfo
	// the signal masks of threads whose signals are blocked for a step
	masks map[int]uint64
	// the journals of the processes with int3 bytes in (journal_linux.go)
	journals   map[int]*procJournal
	journalDir string
	// the watches of each process, by debug register (watch_linux.go)
	watches map[int]*procWatches
	// the tracer's liveness page (live_linux.go), nil until a pad needs it
	live *live
	// the executable mappings of each process, and the files' CFI and
	// symbols, for log ustack (stack_linux.go)
	stackMaps map[int]unwind.Modules
	unwinder  *unwind.Unwinder
	// warn tells the user what failed with no command to fail (the
	// engine's Options.Warn, through SetWarn)
	warn func(string)
}

var _ engine.Warner = (*Target)(nil)

// SetWarn is engine.Warner's.
func (tg *Target) SetWarn(f func(string)) { tg.warn = f }

// warnf says a failure through warn, if there is one.
func (tg *Target) warnf(format string, a ...any) {
	if tg.warn != nil {
		tg.warn(fmt.Sprintf(format, a...))
	}
}

// The optional abilities a process target has (engine/target.go).
var (
	_ engine.Target             = (*Target)(nil)
	_ engine.SignalHolder       = (*Target)(nil)
	_ engine.SignalBlocker      = (*Target)(nil)
	_ engine.Dumper             = (*Target)(nil)
	_ engine.XOLMapper          = (*Target)(nil)
	_ engine.JumpHost           = (*Target)(nil)
	_ engine.SemaphoreJournaler = (*Target)(nil)
	_ engine.TargetCloser       = (*Target)(nil)
)

func newTarget(t *Tracer) *Target {
	return &Target{t: t, raw: map[int]*unix.PtraceRegs{}, held: map[int][]*Siginfo{}, resent: map[int][]*Siginfo{}, masks: map[int]uint64{},
		journals: map[int]*procJournal{}}
}

// Hold keeps back the signal a thread is stopped for: the engine resumes
// it with none. Its siginfo is kept for Release.
func (tg *Target) Hold(tid int) error {
	si, err := SigInfo(tid)
	if err != nil {
		return err
	}
	tg.held[tid] = append(tg.held[tid], si)
	return nil
}

// syncSignals are the signals an instruction raises, which BlockSignals
// leaves as they are.
const syncSignals uint64 = 1<<(unix.SIGSEGV-1) | 1<<(unix.SIGBUS-1) | 1<<(unix.SIGFPE-1) | 1<<(unix.SIGILL-1) | 1<<(unix.SIGTRAP-1) | 1<<(unix.SIGSYS-1)

// BlockSignals blocks the asynchronous signals of stopped thread tid
// (PTRACE_SETSIGMASK), keeping its mask for UnblockSignals. The signals
// an instruction raises (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP,
// SIGSYS) stay as they were: the kernel forces such a fault through a
// blocked mask by resetting its handler to the default, and the program's
// own SIGSEGV handler would be lost (TestLogOnFault's fixture died).
func (tg *Target) BlockSignals(tid int) error {
	if _, ok := tg.masks[tid]; ok {
		return nil
	}
	var old uint64
	if err := sigmask(unix.PTRACE_GETSIGMASK, tid, &old); err != nil {
		return err
	}
	blocked := old | ^syncSignals
	if err := sigmask(unix.PTRACE_SETSIGMASK, tid, &blocked); err != nil {
		return err
	}
	tg.masks[tid] = old
	return nil
}

// UnblockSignals gives stopped thread tid its mask back: what came
// meanwhile is delivered once it runs.
func (tg *Target) UnblockSignals(tid int) error {
	old, ok := tg.masks[tid]
	if !ok {
		return nil
	}
	delete(tg.masks, tid)
	return sigmask(unix.PTRACE_SETSIGMASK, tid, &old)
}

func sigmask(req int, tid int, m *uint64) error {
	if _, _, errno := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(tid), 8, uintptr(unsafe.Pointer(m)), 0, 0); errno != 0 {
		return fmt.Errorf("signal mask of %d: %w", tid, errno)
	}
	return nil
}

// Inert reports whether delivering sig to thread tid runs none of its code
// and changes nothing: ignored (SigIgn), or not caught (SigCgt) with a
// default action of ignoring it, read from /proc/TID/status (one set of
// dispositions per process). Unreadable: not inert.
func (tg *Target) Inert(tid, sig int) bool {
	if sig <= 0 || sig > 64 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", tid))
	if err != nil {
		return false
	}
	var ign, cgt uint64
	var haveIgn, haveCgt bool
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			ign, err = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			haveIgn = err == nil
		}
		if v, ok := strings.CutPrefix(line, "SigCgt:"); ok {
			cgt, err = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			haveCgt = err == nil
		}
	}
	if !haveIgn || !haveCgt {
		return false
	}
	bit := uint64(1) << (uint(sig) - 1)
	if ign&bit != 0 {
		return true
	}
	if cgt&bit != 0 {
		return false
	}
	switch unix.Signal(sig) {
	case unix.SIGCHLD, unix.SIGCONT, unix.SIGURG, unix.SIGWINCH:
		return true
	}
	return false
}

// Release sends the held signals to the thread again (tgkill). The
// kernel gives such a signal a siginfo of its own (SI_TKILL, our pid):
// when its stop comes, the original siginfo is put back (convert), so
// the handler sees what it would have seen, a child's exit status say.
func (tg *Target) Release(tid int) error {
	th := tg.t.Thread(tid)
	if th == nil {
		return fmt.Errorf("release signals of %d: not traced", tid)
	}
	var errs []error
	for _, si := range tg.held[tid] {
		if err := unix.Tgkill(th.Pid, tid, unix.Signal(si.Signo())); err != nil {
			errs = append(errs, fmt.Errorf("resend signal %d to %d: %w", si.Signo(), tid, err))
			continue
		}
		tg.resent[tid] = append(tg.resent[tid], si)
	}
	delete(tg.held, tid)
	return errors.Join(errs...)
}

// restoreSiginfo gives a resent signal its original siginfo back. A
// signal of the same number that came meanwhile merges with ours (the
// kernel keeps one of each standard signal pending): then the one
// reported is that one's, and ours is dropped as the kernel would.
func (tg *Target) restoreSiginfo(ev *engine.Event) {
	q := tg.resent[ev.Tid]
	for i, orig := range q {
		if orig.Signo() != ev.Sig {
			continue
		}
		tg.resent[ev.Tid] = append(q[:i:i], q[i+1:]...)
		if len(tg.resent[ev.Tid]) == 0 {
			delete(tg.resent, ev.Tid)
		}
		cur, err := SigInfo(ev.Tid)
		if err == nil && cur.Code() == -6 /* SI_TKILL */ && cur.Pid() == os.Getpid() && SetSigInfo(ev.Tid, orig) == nil {
			ev.Async = orig.Async()
		}
		return
	}
}

// Exec returns an opener for engine.Start that runs a program under the
// tracer, held at its first instruction. files are its stdin, stdout and
// stderr; none given means the tracer's.
func Exec(path string, argv, env []string, dir string, files ...*os.File) func() (engine.Target, error) {
	return func() (engine.Target, error) {
		t := NewTracer()
		if len(files) == 0 {
			files = nil
		}
		tg := newTarget(t)
		if err := tg.openJournals(0); err != nil {
			t.endKickee()
			return nil, err
		}
		if _, err := t.Start(path, argv, env, dir, files); err != nil {
			t.endKickee()
			return nil, err
		}
		return tg, nil
	}
}

// Attach returns an opener for engine.Start that attaches to a running
// process, held stopped in its main thread (the others run).
func Attach(pid int) func() (engine.Target, error) {
	return func() (engine.Target, error) {
		t := NewTracer()
		tg := newTarget(t)
		// before attaching: a dead gprobes's bytes go back first, and a
		// live one's is named
		if err := tg.openJournals(pid); err != nil {
			t.endKickee()
			return nil, err
		}
		if _, err := t.Attach(pid); err != nil {
			t.endKickee()
			return nil, err
		}
		return tg, nil
	}
}

// CloseTarget ends the tracer's kickee as the engine's loop ends.
func (tg *Target) CloseTarget() { tg.t.endKickee() }

func (tg *Target) Wait() (engine.Event, error) {
	ev, err := tg.t.Wait()
	if errors.Is(err, ErrNoTracees) {
		return engine.Event{}, engine.ErrNoTracees
	}
	if err != nil {
		return engine.Event{}, err
	}
	return tg.convert(ev), nil
}

func (tg *Target) convert(ev Event) engine.Event {
	out := engine.Event{Tid: ev.Tid, Space: ev.Pid, Sig: ev.Sig, Parent: ev.Parent}
	switch ev.Kind {
	case EventTrap:
		out.Kind = engine.EvTrap
	case EventSignal:
		out.Kind = engine.EvSignal
		out.Async = ev.Async
		if len(tg.resent[ev.Tid]) > 0 {
			tg.restoreSiginfo(&out)
		}
	case EventKick:
		out.Kind = engine.EvKick
	case EventNewThread:
		out.Kind = engine.EvNewThread
	case EventNewProcess:
		out.Kind = engine.EvNewSpace
		tg.liveFork(ev.Pid, ev.Parent)
		tg.journalFork(ev.Pid, ev.Parent)
	case EventExec:
		out.Kind = engine.EvExec
		delete(tg.raw, ev.Tid)
		tg.journalDrop(ev.Pid) // a new image: none of our bytes
		tg.liveForget(ev.Pid)
		tg.watchDrop(ev.Pid) // nor debug registers (the kernel cleared them)
		tg.stackForget(ev.Pid)
	case EventThreadExit:
		out.Kind = engine.EvThreadExit
		tg.forget(ev.Tid)
	case EventSyscall:
		out.Kind = engine.EvSyscall
	case EventProcessExit:
		out.Kind = engine.EvSpaceExit
		tg.forget(ev.Tid)
		tg.journalDrop(ev.Pid)
		tg.liveForget(ev.Pid)
		tg.watchDrop(ev.Pid)
		tg.stackForget(ev.Pid)
		switch {
		case ev.Status.Exited():
			out.Exit = fmt.Sprintf("exited %d", ev.Status.ExitStatus())
			out.Code = ev.Status.ExitStatus()
		case ev.Status.Signaled():
			out.Exit = "killed by " + unix.SignalName(ev.Status.Signal())
			out.Code = 128 + int(ev.Status.Signal())
		}
	}
	return out
}

func (tg *Target) Kick() bool { return tg.t.Kick() }

func (tg *Target) proc(space int) (*Process, error) {
	p := tg.t.Process(space)
	if p == nil {
		return nil, fmt.Errorf("process %d is not traced", space)
	}
	return p, nil
}

func (tg *Target) ReadMem(space int, addr uint64, b []byte) error {
	p, err := tg.proc(space)
	if err != nil {
		return err
	}
	return p.ReadMem(addr, b)
}

func (tg *Target) WriteMem(space int, addr uint64, b []byte) error {
	p, err := tg.proc(space)
	if err != nil {
		return err
	}
	return p.WriteMem(addr, b)
}

func (tg *Target) GetRegs(tid int, r *engine.Regs) error {
	raw := tg.raw[tid]
	if raw == nil {
		raw = new(unix.PtraceRegs)
		tg.raw[tid] = raw
	}
	if err := tg.t.GetRegs(tid, raw); err != nil {
		return err
	}
	fromRaw(raw, r)
	return nil
}

func (tg *Target) SetRegs(tid int, r *engine.Regs) error {
	raw := tg.raw[tid]
	if raw == nil {
		raw = new(unix.PtraceRegs)
		if err := tg.t.GetRegs(tid, raw); err != nil {
			return err
		}
		tg.raw[tid] = raw
	}
	toRaw(r, raw)
	return tg.t.SetRegs(tid, raw)
}

func fromRaw(raw *unix.PtraceRegs, r *engine.Regs) {
	r[rpn.RegRAX], r[rpn.RegRBX], r[rpn.RegRCX], r[rpn.RegRDX] = raw.Rax, raw.Rbx, raw.Rcx, raw.Rdx
	r[rpn.RegRSI], r[rpn.RegRDI], r[rpn.RegRBP], r[rpn.RegRSP] = raw.Rsi, raw.Rdi, raw.Rbp, raw.Rsp
	r[rpn.RegR8], r[rpn.RegR9], r[rpn.RegR10], r[rpn.RegR11] = raw.R8, raw.R9, raw.R10, raw.R11
	r[rpn.RegR12], r[rpn.RegR13], r[rpn.RegR14], r[rpn.RegR15] = raw.R12, raw.R13, raw.R14, raw.R15
	r[rpn.RegRIP], r[rpn.RegRFLAGS] = raw.Rip, raw.Eflags
	r[rpn.RegCS], r[rpn.RegSS], r[rpn.RegDS], r[rpn.RegES], r[rpn.RegFS], r[rpn.RegGS] = raw.Cs, raw.Ss, raw.Ds, raw.Es, raw.Fs, raw.Gs
	r[rpn.RegFSBase], r[rpn.RegGSBase] = raw.Fs_base, raw.Gs_base
}

func toRaw(r *engine.Regs, raw *unix.PtraceRegs) {
	raw.Rax, raw.Rbx, raw.Rcx, raw.Rdx = r[rpn.RegRAX], r[rpn.RegRBX], r[rpn.RegRCX], r[rpn.RegRDX]
	raw.Rsi, raw.Rdi, raw.Rbp, raw.Rsp = r[rpn.RegRSI], r[rpn.RegRDI], r[rpn.RegRBP], r[rpn.RegRSP]
	raw.R8, raw.R9, raw.R10, raw.R11 = r[rpn.RegR8], r[rpn.RegR9], r[rpn.RegR10], r[rpn.RegR11]
	raw.R12, raw.R13, raw.R14, raw.R15 = r[rpn.RegR12], r[rpn.RegR13], r[rpn.RegR14], r[rpn.RegR15]
	raw.Rip, raw.Eflags = r[rpn.RegRIP], r[rpn.RegRFLAGS]
	raw.Fs_base, raw.Gs_base = r[rpn.RegFSBase], r[rpn.RegGSBase]
	// segment selectors are read-only to probe programs
}

func (tg *Target) Step(tid int) error { return tg.t.Step(tid) }

func (tg *Target) Resume(tid, sig int) error { return tg.t.Resume(tid, sig) }

func (tg *Target) StopThread(tid int) ([]engine.Event, error) {
	evs, err := tg.t.StopThread(tid)
	var out []engine.Event
	for _, ev := range evs {
		out = append(out, tg.convert(ev))
	}
	return out, err
}

func (tg *Target) DrainKick(tid int) ([]int, error) { return tg.t.DrainKick(tid) }

func (tg *Target) Detach(tid, sig int) error {
	tg.forget(tid)
	return tg.t.Detach(tid, sig)
}

// forget drops what is kept of a thread that is gone or let go.
func (tg *Target) forget(tid int) {
	delete(tg.raw, tid)
	delete(tg.held, tid)
	delete(tg.resent, tid)
	delete(tg.masks, tid)
	tg.liveClear(tid)
}

func (tg *Target) Threads(space int) []int {
	p := tg.t.Process(space)
	if p == nil {
		return nil
	}
	out := make([]int, 0, len(p.Threads))
	for tid := range p.Threads {
		out = append(out, tid)
	}
	return out
}

func (tg *Target) Spaces() []int {
	var out []int
	for _, p := range tg.t.Processes() {
		out = append(out, p.Pid)
	}
	return out
}

func (tg *Target) ThreadIndex(tid int) int {
	if th := tg.t.Thread(tid); th != nil {
		return th.Index
	}
	return -1
}

func (tg *Target) IsStopped(tid int) bool {
	th := tg.t.Thread(tid)
	return th != nil && th.Stopped
}

// injectAt is where gprobes injects system calls into a process: its
// entry point, code no thread runs again.
func injectAt(space int) (uint64, error) {
	aux, err := Auxv(space)
	if err != nil {
		return 0, fmt.Errorf("read auxv: %w", err)
	}
	if aux[AtEntry] == 0 {
		return 0, errors.New("no entry point in auxv")
	}
	return aux[AtEntry], nil
}

// System calls gprobes injects.
const (
	sysClose  = 3
	sysMmap   = 9
	sysMunmap = 11
	sysOpenat = 257
)

// inject makes stopped thread tid of space run one system call at the
// program's entry point, after checking that the thread's seccomp state
// lets it (seccompCheck): a refused call is not made, and the error says
// why.
func (tg *Target) inject(space, tid int, entry uint64, c sysCall) (uint64, error) {
	if err := seccompCheck(space, tid, entry, c); err != nil {
		return 0, err
	}
	return tg.t.InjectSyscall(tid, entry, c.nr, c.args...)
}

// AllocXOL maps an executable area of size bytes near addr, making
// thread tid call mmap from the program's entry point (code no thread
// runs again). The place is found in the process's mappings
// (freeNear): the free gap closest to near within ±2 GiB, clear of
// where the heap and the main stack grow; it is mapped there with
// MAP_FIXED_NOREPLACE, so that a mapping another thread made meanwhile is
// never replaced (the search starts again). When no gap is within reach
// the area goes wherever the kernel puts it (an out-of-line slot far from
// its code still serves instructions with no RIP-relative operand).
func (tg *Target) AllocXOL(space, tid int, near, size uint64) (uint64, error) {
	entry, err := injectAt(space)
	if err != nil {
		return 0, err
	}
	prot := uint64(unix.PROT_READ | unix.PROT_EXEC)
	flags := uint64(unix.MAP_PRIVATE | unix.MAP_ANONYMOUS)
	for try := 0; try < 4; try++ {
		maps, err := Maps(space)
		if err != nil {
			return 0, err
		}
		at, ok := freeNear(maps, near, size, growthReserves(space, maps))
		if !ok {
			break
		}
		addr, err := tg.inject(space, tid, entry, sysCall{"mmap", sysMmap, []uint64{at, size, prot, flags | unix.MAP_FIXED_NOREPLACE, ^uint64(0), 0}})
		if errors.Is(err, unix.EEXIST) {
			continue // mapped meanwhile by another thread: look again
		}
		if err != nil {
			return 0, err
		}
		if addr == at {
			return addr, nil
		}
		// a kernel before 4.17 reads MAP_FIXED_NOREPLACE as a hint it
		// did not take
		if _, err := tg.inject(space, tid, entry, sysCall{"munmap", sysMunmap, []uint64{addr, size}}); err != nil {
			return 0, err
		}
	}
	return tg.inject(space, tid, entry, sysCall{"mmap", sysMmap, []uint64{0, size, prot, flags, ^uint64(0), 0}})
}

// Unmap unmaps [addr, addr+size) of the space, making stopped thread tid
// call munmap (what AllocXOL and MapShared mapped, when gprobes lets the
// process go).
func (tg *Target) Unmap(space, tid int, addr, size uint64) error {
	entry, err := injectAt(space)
	if err != nil {
		return err
	}
	_, err = tg.inject(space, tid, entry, sysCall{"munmap", sysMunmap, []uint64{addr, size}})
	if err == nil {
		tg.liveUnmapped(space, addr)
	}
	return err
}

// SharesMemory reports whether processes a and b have one address space
// (a vfork child and its parent, clone with CLONE_VM): kcmp(KCMP_VM).
func (tg *Target) SharesMemory(a, b int) (bool, error) {
	const kcmpVM = 1
	r, _, errno := unix.Syscall6(unix.SYS_KCMP, uintptr(a), uintptr(b), kcmpVM, 0, 0, 0)
	if errno != 0 {
		return false, fmt.Errorf("kcmp %d %d: %w", a, b, errno)
	}
	return r == 0, nil
}

// MapStacks maps size bytes of private read-write memory in the process,
// anywhere, reserving no swap for what is never touched (jump pads'
// stacks: a few KiB of each used).
func (tg *Target) MapStacks(space, tid int, size uint64) (uint64, error) {
	entry, err := injectAt(space)
	if err != nil {
		return 0, err
	}
	addr, err := tg.inject(space, tid, entry, sysCall{"mmap", sysMmap, []uint64{0, size, uint64(unix.PROT_READ | unix.PROT_WRITE),
		uint64(unix.MAP_PRIVATE | unix.MAP_ANONYMOUS | unix.MAP_NORESERVE), ^uint64(0), 0}})
	if err != nil {
		return 0, err
	}
	if int64(addr) < 0 && int64(addr) > -4096 {
		return 0, fmt.Errorf("mmap of %d bytes: %w", size, unix.Errno(-int64(addr)))
	}
	return addr, nil
}

// MapShared maps gprobes' memfd fd (size bytes) into the process, read
// and write, shared: thread tid (stopped) opens it through
// /proc/<gprobes>/fd/<fd> and maps it, with system calls injected at the
// program's entry point; the process keeps the mapping, not the
// descriptor. Opening another process's descriptor needs ptrace rights
// over it: a process of the same user, or root's. The path is written on
// the thread's stack below its red zone, where nothing lives. The three
// calls are checked against the thread's seccomp state first: none is
// made unless all may be.
func (tg *Target) MapShared(space, tid int, fd int, size uint64) (uint64, error) {
	entry, err := injectAt(space)
	if err != nil {
		return 0, err
	}
	var regs engine.Regs
	if err := tg.GetRegs(tid, &regs); err != nil {
		return 0, err
	}
	path := fmt.Sprintf("/proc/%d/fd/%d\x00", os.Getpid(), fd)
	at := (regs[rpn.RegRSP] - 4096) &^ 15
	const atFDCWD = ^uint64(99) // -100
	open := sysCall{"openat", sysOpenat, []uint64{atFDCWD, at, uint64(unix.O_RDWR | unix.O_CLOEXEC), 0}}
	mmap := func(tfd uint64) sysCall {
		return sysCall{"mmap", sysMmap, []uint64{0, size, uint64(unix.PROT_READ | unix.PROT_WRITE), uint64(unix.MAP_SHARED), tfd, 0}}
	}
	closeFD := func(tfd uint64) sysCall { return sysCall{"close", sysClose, []uint64{tfd}} }
	// the descriptor is not known yet: the checks use 3, the lowest a
	// process usually gets, and each call is checked again as it is made
	if err := seccompCheck(space, tid, entry, open, mmap(3), closeFD(3)); err != nil {
		return 0, err
	}
	if err := tg.WriteMem(space, at, []byte(path)); err != nil {
		return 0, fmt.Errorf("write the path for openat: %w", err)
	}
	tfd, err := tg.inject(space, tid, entry, open)
	if err != nil {
		return 0, err
	}
	if int64(tfd) < 0 {
		return 0, fmt.Errorf("the process cannot open gprobes' shared memory (%s): %w", strings.TrimSuffix(path, "\x00"), unix.Errno(-int64(tfd)))
	}
	addr, err := tg.inject(space, tid, entry, mmap(tfd))
	if r, cerr := tg.inject(space, tid, entry, closeFD(tfd)); cerr != nil || int64(r) < 0 {
		tg.warnf("process %d keeps descriptor %d of gprobes' shared memory open: close: %v (result %d)", space, int64(tfd), cerr, int64(r))
	}
	if err != nil {
		return 0, err
	}
	if int64(addr) < 0 && int64(addr) > -4096 {
		return 0, fmt.Errorf("map gprobes' shared memory in the process: %w", unix.Errno(-int64(addr)))
	}
	return addr, nil
}

// ShadowStack reports whether a thread of the process runs with a
// shadow stack (CET: "shstk" in /proc/PID/status's x86_Thread_features).
func (tg *Target) ShadowStack(space int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", space))
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "x86_Thread_features:") && strings.Contains(l, "shstk") {
			return true
		}
	}
	return false
}

// MapRanges returns the process's mappings, in order.
func (tg *Target) MapRanges(space int) ([][2]uint64, error) {
	maps, err := Maps(space)
	if err != nil {
		return nil, err
	}
	out := make([][2]uint64, 0, len(maps))
	for _, m := range maps {
		out = append(out, [2]uint64{m.Start, m.End})
	}
	return out, nil
}

// FSGSBase reports whether the kernel lets the process's code run
// rdfsbase and rdgsbase (AT_HWCAP2's FSGSBASE bit).
func (tg *Target) FSGSBase(space int) bool {
	const (
		atHWCAP2 = 26
		fsgsbase = 1 << 1
	)
	aux, err := Auxv(space)
	return err == nil && aux[atHWCAP2]&fsgsbase != 0
}

// TIDOffset says where stopped thread tid finds its own id from its
// fs_base, for jump pads: glibc's struct pthread keeps it at 0x2d0. It
// returns 0 (ask the kernel) unless the thread's memory holds the id
// there and the kernel lets user code run rdfsbase (AT_HWCAP2's FSGSBASE
// bit).
func (tg *Target) TIDOffset(space, tid int) uint64 {
	const (
		atHWCAP2 = 26
		fsgsbase = 1 << 1
		glibcTID = 0x2d0
	)
	if !tg.FSGSBase(space) {
		return 0
	}
	var r engine.Regs
	if tg.GetRegs(tid, &r) != nil || r[rpn.RegFSBase] == 0 {
		return 0
	}
	var b [4]byte
	if tg.ReadMem(space, r[rpn.RegFSBase]+glibcTID, b[:]) != nil {
		return 0
	}
	// the id the thread sees (its pid namespace's)
	own, _ := tg.NSIDs(tid)
	if int(uint32(b[0])|uint32(b[1])<<8|uint32(b[2])<<16|uint32(b[3])<<24) != own {
		return 0
	}
	return glibcTID
}

// NSIDs returns the ids thread tid sees for itself and its process
// (gettid, getpid: those of the innermost pid namespace it is in, from
// NSpid and NStgid of /proc/TID/status); the same as gprobes' when the
// process runs in gprobes' namespace, or /proc cannot tell.
func (tg *Target) NSIDs(tid int) (nsTid, nsPid int) {
	nsTid = tid
	if th := tg.t.Thread(tid); th != nil {
		nsPid = th.Pid
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", tid))
	if err != nil {
		return nsTid, nsPid
	}
	last := func(v string) (int, bool) {
		f := strings.Fields(v)
		if len(f) == 0 {
			return 0, false
		}
		n, err := strconv.Atoi(f[len(f)-1])
		return n, err == nil && n > 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		switch k {
		case "NSpid":
			if n, ok := last(v); ok {
				nsTid = n
			}
		case "NStgid":
			if n, ok := last(v); ok {
				nsPid = n
			}
		}
	}
	return nsTid, nsPid
}

// Dump writes an ELF core of the process: every thread is stopped for the
// time of the dump, then goes on.
func (tg *Target) Dump(space, tid int, dir string) (string, error) {
	p := tg.t.Process(space)
	if p == nil {
		return "", fmt.Errorf("process %d is not traced", space)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	var stopped []int
	var pending []Event
	for t := range p.Threads {
		th := tg.t.Thread(t)
		if th == nil || th.Stopped {
			continue
		}
		evs, err := tg.t.StopThread(t)
		pending = append(pending, evs...)
		if err == nil && len(evs) == 0 {
			stopped = append(stopped, t)
		}
	}
	defer func() {
		for _, t := range stopped {
			if err := tg.t.Resume(t, 0); err != nil {
				tg.warnf("thread %d after the dump: %v", t, err)
			}
		}
		tg.t.Queue(pending...)
	}()
	cp := &coredump.Process{PID: space, Mem: p.mem}
	order := []int{tid}
	for t := range p.Threads {
		if t != tid {
			order = append(order, t)
		}
	}
	for _, t := range order {
		var regs unix.PtraceRegs
		if tg.t.GetRegs(t, &regs) != nil {
			continue
		}
		cp.Threads = append(cp.Threads, coredump.Thread{TID: t, Regs: syscall.PtraceRegs(regs)})
	}
	name := fmt.Sprintf("core.%d.%s", space, time.Now().UTC().Format("20060102T150405.000000000"))
	path, _, err := coredump.WriteFile(dir, name, cp, coredump.Options{})
	return path, err
}
