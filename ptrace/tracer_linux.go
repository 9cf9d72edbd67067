package ptrace

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// EventKind says what stopped a tracee.
type EventKind uint8

const (
	// EventTrap: a SIGTRAP stop that is no ptrace event: an int3 was hit,
	// or a single-step completed. The engine knows which.
	EventTrap EventKind = iota
	// EventSignal: the tracee is about to receive Sig; resume with Sig to
	// deliver it, 0 to suppress it.
	EventSignal
	// EventKick: the SIGSTOP of Kick; resume without a signal.
	EventKick
	// EventNewThread: the first stop of a new thread of a known process.
	EventNewThread
	// EventNewProcess: the first stop of a process forked or vforked from
	// Parent; its memory is a copy of the parent's (shared for vfork).
	EventNewProcess
	// EventExec: the process called exec; its address space is new.
	EventExec
	// EventThreadExit: a thread other than the last one is gone.
	EventThreadExit
	// EventProcessExit: the process is gone; Status says how.
	EventProcessExit
	// EventSyscall: a system call's entry or exit, for a thread resumed
	// to stop there (Thread.SyscallStops).
	EventSyscall
)

var eventNames = [...]string{"trap", "signal", "kick", "new-thread", "new-process", "exec", "thread-exit", "process-exit", "syscall"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) {
		return eventNames[k]
	}
	return "event(" + strconv.Itoa(int(k)) + ")"
}

// Event is one stop (or end) of a tracee. A stopped tracee stays stopped
// until the engine resumes it.
type Event struct {
	Kind   EventKind
	Tid    int
	Pid    int // thread group: the process
	Sig    int
	Parent int // EventNewProcess: the process it was forked from
	Status unix.WaitStatus
	// Async (EventSignal): the signal was sent to the thread (kill, a
	// child's exit, a timer), not raised by the instruction at its rip
	Async bool
	// Ours (EventSignal): sent by this process with tgkill (a SIGSTOP of
	// ours whose kick was already counted, a held signal sent again)
	Ours bool
}

// ErrNoTracees is returned by Wait when no tracee is left.
var ErrNoTracees = errors.New("ptrace: no tracee left")

// Process is one traced address space.
type Process struct {
	Pid     int
	Threads map[int]*Thread
	mem     *os.File
	Exec    bool // started by the tracer (killed if the tracer dies)
	// seized: attached with PTRACE_SEIZE (or followed from one that
	// was): its group-stops are reported as such, and honoured
	seized bool
	// groupStop: the process is stopped by a stop signal (SIGSTOP,
	// SIGTSTP, SIGTTIN, SIGTTOU) until a SIGCONT: its threads are left
	// stopped (PTRACE_LISTEN) whenever the tracer does not need them
	groupStop bool
}

// Thread is one traced thread.
type Thread struct {
	Tid     int
	Pid     int
	Index   int  // order in which the tracer met it, per tracer: the "procid" of processes
	Stopped bool // in a ptrace stop
	kicks   atomic.Int32
	// SyscallStops: resumed with PTRACE_SYSCALL, the thread stops at the
	// entry and the exit of its system calls (EventSyscall)
	SyscallStops bool
	// listening: in its process's group-stop, let go with PTRACE_LISTEN
	// (stopped, not in a ptrace stop: Kick cannot reach it)
	listening atomic.Bool
	// interrupts: PTRACE_INTERRUPTs of the tracer's whose stop has not
	// come; relisten: the next PTRACE_EVENT_STOP only takes the thread
	// back to its group-stop; eventStop: its current stop is a
	// PTRACE_EVENT_STOP (which PTRACE_LISTEN needs)
	interrupts int
	relisten   bool
	eventStop  bool
	// stepping: last resumed with PTRACE_SINGLESTEP, its trap not come
	stepping bool
	// reraised: a SIGSTOP that came during an injected system call was
	// sent again by the tracer (tgkill): its stop is the program's
	reraised bool
}

// Tracer follows one process tree. Create it, and call every method, from
// one goroutine: NewTracer locks it to its OS thread.
type Tracer struct {
	procs   map[int]*Process
	threads map[int]*Thread
	nextIdx int
	mu      sync.Mutex // guards kickTarget for Kick, the only method other goroutines call
	kickTo  *Thread
	// stops seen while the tracer waited for a specific thread (StopAll,
	// InjectSyscall), handed out by Wait before it blocks again
	queued []Event
	// kickee is a child process of the tracer thread that Kick stops
	// (SIGSTOP): its stop wakes Wait, which lets it go on (SIGCONT). Kick
	// used to stop a tracee with SIGSTOP, which, when the tracer was
	// killed before the tracee took it, stopped the whole process for
	// good once it was no longer traced.
	kickee atomic.Int32
	// listeners counts threads let go with PTRACE_LISTEN: while there
	// are, Wait polls, and a Kick that found its thread listening
	// (kickReq) interrupts one
	listeners int
	kickReq   atomic.Bool
}

// kickeeEnv makes a gprobes process a kickee (init below).
const kickeeEnv = "GPROBES_KICKEE"

func init() {
	if os.Getenv(kickeeEnv) == "1" {
		// a kickee: nothing to do but be stopped and continued, and die
		// with its tracer thread (PR_SET_PDEATHSIG)
		for {
			unix.Pause() // unchecked: it returns only when a signal came, to pause again
		}
	}
}

// startKickee starts the tracer's kickee, a copy of this program that
// only pauses, as a child of the calling thread (the tracer's): it dies
// with that thread.
func (t *Tracer) startKickee() {
	// /proc/self/exe: the running program even if its file was replaced
	// or removed since (an upgrade under a running daemon)
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = []string{kickeeEnv + "=1"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if cmd.Start() == nil {
		t.kickee.Store(int32(cmd.Process.Pid))
	}
}

// endKickee kills the kickee and reaps it (it would stay a zombie of
// gprobes' once the tracer thread is gone). Under t.mu: no Kick signals
// its pid once it may be reaped and used again.
func (t *Tracer) endKickee() {
	t.mu.Lock()
	k := int(t.kickee.Swap(0))
	if k > 0 {
		unix.Kill(k, unix.SIGKILL) // unchecked: fails only when it is dead already, which is the point
	}
	t.mu.Unlock()
	if k <= 0 {
		return
	}
	var ws unix.WaitStatus
	for {
		if _, err := unix.Wait4(k, &ws, unix.WALL, nil); err != unix.EINTR {
			return
		}
	}
}

// kickeeEvent handles a wait status of the kickee: its stop is a kick
// (it goes on at once); its end, no more kicks through it.
func (t *Tracer) kickeeEvent(ws unix.WaitStatus) (Event, bool) {
	k := int(t.kickee.Load())
	if ws.Stopped() {
		// unchecked: fails only when the kickee is gone; its end comes
		// next, and Kick stops through a tracee then
		unix.Kill(k, unix.SIGCONT)
		return Event{Kind: EventKick}, true
	}
	if ws.Exited() || ws.Signaled() {
		t.mu.Lock()
		t.kickee.Store(0)
		t.mu.Unlock()
	}
	return Event{}, false
}

// options: TRACESYSGOOD marks system-call stops (SIGTRAP|0x80), which a
// thread stopped at one when the tracer dies also needs: the kernel then
// sends it that stop's signal, and 0x85 is none (SIGTRAP would kill it).
const options = unix.PTRACE_O_TRACECLONE | unix.PTRACE_O_TRACEFORK | unix.PTRACE_O_TRACEVFORK | unix.PTRACE_O_TRACEEXEC | unix.PTRACE_O_TRACESYSGOOD

// NewTracer locks the calling goroutine to its OS thread for good: every
// later ptrace call must come from it.
func NewTracer() *Tracer {
	runtime.LockOSThread()
	t := &Tracer{procs: map[int]*Process{}, threads: map[int]*Thread{}}
	t.startKickee()
	return t
}

// Start runs path with argv under the tracer, stopped at its first
// instruction after exec. files are its stdin, stdout, stderr (nil: the
// tracer's).
func (t *Tracer) Start(path string, argv []string, env []string, dir string, files []*os.File) (*Process, error) {
	if files == nil {
		files = []*os.File{os.Stdin, os.Stdout, os.Stderr}
	}
	attr := &os.ProcAttr{
		Dir:   dir,
		Env:   env,
		Files: files,
		Sys:   &syscall.SysProcAttr{Ptrace: true, Pdeathsig: syscall.SIGKILL},
	}
	p, err := os.StartProcess(path, argv, attr)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	pid := p.Pid
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, unix.WALL|unix.WNOTHREAD, nil); err != nil {
		return nil, fmt.Errorf("start %s: wait for exec: %w", path, err)
	}
	if !ws.Stopped() {
		return nil, fmt.Errorf("start %s: the process did not stop after exec (%v)", path, ws)
	}
	if err := reseize(pid); err != nil {
		unix.Kill(pid, unix.SIGKILL) // unchecked: the start failed; a process already gone is what is wanted
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	proc, err := t.addProcess(pid)
	if err != nil {
		return nil, err
	}
	proc.Exec = true
	proc.seized = true
	th := proc.Threads[pid]
	th.Stopped = true
	th.eventStop = true
	return proc, nil
}

// reseize turns the PTRACE_TRACEME of a process just started (stopped at
// the SIGTRAP of its exec, before its first instruction) into
// PTRACE_SEIZE, which tells a job-control stop from a signal
// (PTRACE_EVENT_STOP, PTRACE_LISTEN): Ctrl-Z or a SIGSTOP stops a program
// gprobes started as it stops one gprobes attached to. The process is let
// go into a stop of its own (detached with SIGSTOP, seen with WUNTRACED),
// seized with the options, interrupted, and continued (SIGCONT) while it
// sits in that ptrace stop: it has still run nothing of its own. The
// SIGCONT stays pending for it and is delivered once it runs: exec reset
// every handler, so nothing runs for it.
func reseize(pid int) error {
	if _, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(pid), 0, uintptr(unix.SIGSTOP), 0, 0); errno != 0 {
		return fmt.Errorf("detach after exec: %w", errno)
	}
	var ws unix.WaitStatus
	if err := wait4Retry(pid, &ws, unix.WALL|unix.WNOTHREAD|unix.WUNTRACED); err != nil {
		return fmt.Errorf("wait for its stop: %w", err)
	}
	if !ws.Stopped() || ws.StopSignal() != unix.SIGSTOP {
		return fmt.Errorf("it did not stop for SIGSTOP after exec (%v)", ws)
	}
	if _, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(pid), 0, uintptr(options|unix.PTRACE_O_EXITKILL), 0, 0); errno != 0 {
		return fmt.Errorf("seize: %w", errno)
	}
	if err := ptraceInterrupt(pid); err != nil {
		return fmt.Errorf("interrupt: %w", err)
	}
	if err := wait4Retry(pid, &ws, unix.WALL|unix.WNOTHREAD); err != nil {
		return fmt.Errorf("wait for its ptrace stop: %w", err)
	}
	if !ws.Stopped() || int(ws)>>16&0xff != unix.PTRACE_EVENT_STOP {
		return fmt.Errorf("it did not report its stop once seized (%v)", ws)
	}
	if err := unix.Kill(pid, unix.SIGCONT); err != nil {
		return fmt.Errorf("continue: %w", err)
	}
	return nil
}

// wait4Retry is wait4 for one pid, again after EINTR.
func wait4Retry(pid int, ws *unix.WaitStatus, flags int) error {
	for {
		_, err := unix.Wait4(pid, ws, flags, nil)
		if err != unix.EINTR {
			return err
		}
	}
}

// Attach follows every thread of a running process and leaves it stopped
// in the thread that Attach returns ready for the engine's setup; the other
// threads keep running.
func (t *Tracer) Attach(pid int) (*Process, error) {
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
		return nil, fmt.Errorf("attach %d: no such process", pid)
	}
	if is32, err := is32Bit(pid); err == nil && is32 {
		return nil, fmt.Errorf("attach %d: a 32-bit process: gprobes traces x86_64 processes", pid)
	}
	// seize the leader first, with the options (PTRACE_SETOPTIONS needs a
	// stopped tracee; PTRACE_SEIZE takes them at once)
	if why := cannotTrace(pid); why != "" {
		return nil, fmt.Errorf("attach %d: %s", pid, why)
	}
	if err := seize(pid); err != nil {
		if err == unix.EPERM {
			return nil, fmt.Errorf("attach %d: %s", pid, notPermitted(pid))
		}
		return nil, fmt.Errorf("attach %d: %w", pid, err)
	}
	proc, err := t.addProcess(pid)
	if err != nil {
		unix.PtraceDetach(pid) // unchecked: letting go of what could not be kept; it fails only when the thread is gone
		return nil, err
	}
	proc.seized = true
	// then every other thread, again until no new one appeared meanwhile
	for {
		tids, err := taskIDs(pid)
		if err != nil {
			return nil, fmt.Errorf("attach %d: %w", pid, err)
		}
		added := false
		for _, tid := range tids {
			if _, ok := t.threads[tid]; ok {
				continue
			}
			if err := seize(tid); err != nil {
				if err == unix.ESRCH {
					continue // exited meanwhile
				}
				return nil, fmt.Errorf("attach %d: seize thread %d: %w", pid, tid, err)
			}
			t.addThread(proc, tid)
			added = true
		}
		if !added {
			break
		}
	}
	// stop the leader for setup
	if err := t.stopThread(proc.Threads[pid]); err != nil {
		return nil, fmt.Errorf("attach %d: %w", pid, err)
	}
	return proc, nil
}

// cannotTrace says why a process can never be traced, whoever asks: it
// is gprobes itself, a kernel thread, or a zombie; "" otherwise.
func cannotTrace(pid int) string {
	if pid == os.Getpid() {
		return "that is this gprobes itself"
	}
	st := procStatus(pid)
	switch {
	case strings.HasPrefix(st["State"], "Z"):
		return "a zombie: the process has exited and waits for its parent to reap it"
	case strings.HasPrefix(st["State"], "X"):
		return "the process is exiting"
	case st["Kthread"] == "1", st["VmSize"] == "" && st["Name"] != "" && pid != 1 && ppidIsKthreadd(st):
		return fmt.Sprintf("%s is a kernel thread: it has no user code to probe (probe the kernel instead)", st["Name"])
	}
	return ""
}

func ppidIsKthreadd(st map[string]string) bool { return st["PPid"] == "2" || st["Pid"] == "2" }

// notPermitted says why the kernel refused to let us trace pid.
func notPermitted(pid int) string {
	st := procStatus(pid)
	if t := st["TracerPid"]; t != "" && t != "0" {
		name := ""
		if tst := procStatus(atoi(t)); tst["Name"] != "" {
			name = " (" + tst["Name"] + ")"
		}
		return fmt.Sprintf("process %s%s traces it already: only one tracer at a time (detach that debugger, or remove its gprobes probes)", t, name)
	}
	if os.Geteuid() != 0 {
		return "not permitted: run as root, or set kernel.yama.ptrace_scope to 0"
	}
	if b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope"); err == nil && strings.TrimSpace(string(b)) == "3" {
		return "not permitted even to root: kernel.yama.ptrace_scope is 3 (no attach at all until reboot)"
	}
	return "not permitted even to root (a security module refuses it, or the process is in another user namespace)"
}

// procStatus reads /proc/PID/status as keys and values.
func procStatus(pid int) map[string]string {
	return procStatusOf(fmt.Sprintf("/proc/%d/status", pid))
}

// procStatusOf reads a status file of /proc as keys and values.
func procStatusOf(path string) map[string]string {
	out := map[string]string{}
	b, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// seize attaches a thread with PTRACE_SEIZE and the tracer's options.
func seize(tid int) error {
	_, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(tid), 0, uintptr(options), 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

func is32Bit(pid int) (bool, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return false, err
	}
	defer f.Close()
	var hdr [5]byte
	if _, err := f.ReadAt(hdr[:], 0); err != nil {
		return false, err
	}
	return hdr[4] == 1, nil // EI_CLASS ELFCLASS32
}

func taskIDs(pid int) ([]int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, n)
		}
	}
	return out, nil
}

func (t *Tracer) addProcess(pid int) (*Process, error) {
	mem, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", pid), os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open memory of %d: %w", pid, err)
	}
	p := &Process{Pid: pid, Threads: map[int]*Thread{}, mem: mem}
	t.procs[pid] = p
	t.addThread(p, pid)
	return p, nil
}

func (t *Tracer) addThread(p *Process, tid int) *Thread {
	if th, ok := t.threads[tid]; ok {
		return th
	}
	th := &Thread{Tid: tid, Pid: p.Pid, Index: t.nextIdx}
	t.nextIdx++
	p.Threads[tid] = th
	t.threads[tid] = th
	t.mu.Lock()
	if t.kickTo == nil || t.kickTo.Pid != p.Pid && t.procs[t.kickTo.Pid] == nil {
		t.kickTo = th
	}
	t.mu.Unlock()
	return th
}

func (t *Tracer) removeThread(tid int) {
	th, ok := t.threads[tid]
	if !ok {
		return
	}
	delete(t.threads, tid)
	if th.listening.Swap(false) {
		t.listeners--
	}
	if p := t.procs[th.Pid]; p != nil {
		delete(p.Threads, tid)
	}
	t.mu.Lock()
	if t.kickTo == th {
		t.kickTo = nil
		for _, other := range t.threads {
			t.kickTo = other
			break
		}
	}
	t.mu.Unlock()
}

func (t *Tracer) removeProcess(pid int) {
	p := t.procs[pid]
	if p == nil {
		return
	}
	for tid := range p.Threads {
		t.removeThread(tid)
	}
	p.mem.Close()
	delete(t.procs, pid)
}

// Process returns a traced process, or nil.
func (t *Tracer) Process(pid int) *Process { return t.procs[pid] }

// Thread returns a traced thread, or nil.
func (t *Tracer) Thread(tid int) *Thread { return t.threads[tid] }

// Processes lists the traced processes.
func (t *Tracer) Processes() []*Process {
	out := make([]*Process, 0, len(t.procs))
	for _, p := range t.procs {
		out = append(out, p)
	}
	return out
}

// Kick makes Wait return an EventKick soon, from any goroutine: it sends
// SIGSTOP to one running tracee. It reports false when there is no tracee.
func (t *Tracer) Kick() bool {
	t.mu.Lock()
	if k := t.kickee.Load(); k > 0 && unix.Kill(int(k), unix.SIGSTOP) == nil {
		t.mu.Unlock()
		return true
	}
	th := t.kickTo
	t.mu.Unlock()
	if th == nil {
		return false
	}
	if th.listening.Load() {
		// a stopped process: a SIGSTOP would stay pending; Wait, which
		// polls while threads listen, interrupts one instead
		t.kickReq.Store(true)
		return true
	}
	th.kicks.Add(1)
	if err := unix.Tgkill(th.Pid, th.Tid, unix.SIGSTOP); err != nil {
		th.kicks.Add(-1)
		return false
	}
	if th.listening.Load() {
		t.kickReq.Store(true) // it entered a group-stop meanwhile
	}
	return true
}

// Wait blocks until a tracee stops or ends and describes it. It waits
// with __WNOTHREAD, for this thread's tracees only: the other threads of
// the program have children of their own (os/exec, other tracers) whose
// statuses must not be taken. Thread and
// process bookkeeping (new threads, forks, exits, exec) is done before the
// event is returned.
func (t *Tracer) Wait() (Event, error) {
	if len(t.queued) > 0 {
		ev := t.queued[0]
		t.queued = t.queued[1:]
		return ev, nil
	}
	for {
		if len(t.threads) == 0 {
			// every tracee is gone. Waiting on would block for good
			// when this OS thread has a child that is no tracee: the
			// guard (`recover --guard`) may have been started from the
			// thread the engine's goroutine locked later, and an
			// attached process that exited left run --target waiting
			// (and deaf to Ctrl-C) forever
			return Event{}, ErrNoTracees
		}
		var ws unix.WaitStatus
		flags := unix.WALL | unix.WNOTHREAD | unix.WUNTRACED
		if t.listeners > 0 && t.kickee.Load() == 0 {
			// threads left in their group-stop cannot be kicked (with no
			// kickee, Kick stops a tracee): poll, and interrupt one when
			// a Kick asks
			flags |= unix.WNOHANG
			if (t.kickReq.Swap(false) || t.kickedListener()) && t.interruptListener() {
				continue
			}
		}
		tid, err := unix.Wait4(-1, &ws, flags, nil)
		if err == unix.EINTR {
			continue
		}
		if err == unix.ECHILD {
			return Event{}, ErrNoTracees
		}
		if tid == 0 {
			time.Sleep(2 * time.Millisecond)
			continue
		}
		if err != nil {
			return Event{}, fmt.Errorf("wait4: %w", err)
		}
		if tid == int(t.kickee.Load()) {
			if ev, ok := t.kickeeEvent(ws); ok {
				return ev, nil
			}
			continue
		}
		if ev, ok := t.decode(tid, ws); ok {
			return ev, nil
		}
	}
}

// WaitThread waits for the next stop (or the end) of one thread,
// queueing the events of other tracees that arrive meanwhile for Wait.
// It waits for any tracee, not for tid alone: a thread group leader whose
// process is killed (a seccomp filter's verdict on a system call gprobes
// made it run, a SIGKILL from elsewhere) is reported only once the other
// threads are reaped, and waiting for the leader alone waited for good.
func (t *Tracer) WaitThread(tid int) (Event, error) { return t.waitThread(tid, nil) }

// waitThread is WaitThread; with idle non-nil it polls, and calls idle
// after each stretch of idleEvery with nothing to report.
func (t *Tracer) waitThread(tid int, idle func()) (Event, error) {
	flags := unix.WALL | unix.WNOTHREAD | unix.WUNTRACED
	if idle != nil {
		flags |= unix.WNOHANG
	}
	var quiet time.Duration
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, flags, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return Event{}, fmt.Errorf("wait4 for %d: %w", tid, err)
		}
		if got == 0 {
			time.Sleep(time.Millisecond)
			if quiet += time.Millisecond; quiet >= idleEvery {
				quiet = 0
				idle()
			}
			continue
		}
		quiet = 0
		if got == int(t.kickee.Load()) {
			if ev, ok := t.kickeeEvent(ws); ok {
				t.queued = append(t.queued, ev)
			}
			continue
		}
		ev, ok := t.decode(got, ws)
		if !ok {
			continue
		}
		if got != tid && ev.Tid != tid {
			t.queued = append(t.queued, ev)
			continue
		}
		return ev, nil
	}
}

// decode turns a wait status into an event; ok is false for stops the
// tracer handled itself.
func (t *Tracer) decode(tid int, ws unix.WaitStatus) (Event, bool) {
	th := t.threads[tid]
	switch {
	case ws.Exited() || ws.Signaled():
		if th == nil {
			return Event{}, false
		}
		pid := th.Pid
		p := t.procs[pid]
		if tid == pid || p == nil || len(p.Threads) <= 1 {
			t.removeProcess(pid)
			return Event{Kind: EventProcessExit, Tid: tid, Pid: pid, Status: ws}, true
		}
		t.removeThread(tid)
		return Event{Kind: EventThreadExit, Tid: tid, Pid: pid, Status: ws}, true
	case !ws.Stopped():
		return Event{}, false
	}
	if th == nil {
		// the first stop of a thread or process we follow through
		// TRACECLONE or TRACEFORK: find out which
		return t.newTracee(tid, ws)
	}
	th.Stopped = true
	sig := ws.StopSignal()
	ev := Event{Tid: tid, Pid: th.Pid, Sig: int(sig), Status: ws}
	if sig == unix.SIGTRAP|0x80 {
		ev.Kind = EventSyscall
		ev.Sig = 0
		return ev, true
	}
	// the ptrace event in the status's bits 16-23: x/sys's TrapCause
	// reads it only when the stop signal is SIGTRAP, and a group-stop's
	// PTRACE_EVENT_STOP carries the stop signal
	if int(ws)>>16&0xff == unix.PTRACE_EVENT_STOP {
		// a seized tracee's group-stop, or the stop of a PTRACE_INTERRUPT.
		// While its process is group-stopped every such stop reports the
		// stop signal; once a SIGCONT ended it, SIGTRAP
		th.eventStop = true
		if th.listening.Swap(false) {
			t.listeners--
		}
		if p := t.procs[th.Pid]; p != nil {
			p.seized = true
			wasStopped := p.groupStop
			p.groupStop = isStopSignal(sig)
			if wasStopped && !p.groupStop && !stopPending(th.Pid, tid) {
				// a SIGCONT discarded the SIGSTOPs of kicks sent meanwhile
				th.kicks.Store(0)
			}
		}
		if th.interrupts > 0 {
			th.interrupts--
			th.relisten = false
			ev.Kind = EventKick
			return ev, true
		}
		if p := t.procs[th.Pid]; p != nil && p.groupStop && th.kicks.Load() > 0 {
			// a SIGSTOP of ours (StopThread, Kick) sent before the
			// process was known to be stopped: it stays pending there
			// (the SIGCONT that ends the stop discards it), and this
			// stop is the one it asked for
			th.kicks.Add(-1)
			th.relisten = false
			ev.Kind = EventKick
			return ev, true
		}
		th.relisten = false
		if th.stepping {
			// a single-step (an injected system call, an out-of-line
			// step) that a group-stop caught before it ran: a seized
			// tracee of a stopped process reports the stop once more
			// when resumed, then steps
			th.eventStop = false
			if err := unix.PtraceSingleStep(tid); err == nil {
				th.Stopped = false
				return Event{}, false
			}
		}
		// unchecked: a thread that cannot be resumed is gone, and its
		// end is the next event Wait reports
		t.resume(th, 0) // back to the group-stop, or on
		return Event{}, false
	}
	th.stepping = false
	th.eventStop = false
	if sig == unix.SIGTRAP {
		switch ws.TrapCause() {
		case 0, -1:
			ev.Kind = EventTrap
			return ev, true
		case unix.PTRACE_EVENT_EXEC:
			t.execed(th)
			ev.Kind = EventExec
			ev.Pid = th.Pid
			ev.Tid = th.Tid
			return ev, true
		default:
			// fork, vfork, clone: the new tracee reports its own stop;
			// the parent just goes on (unchecked: one that cannot is gone,
			// and its end is the next event)
			t.resume(th, 0)
			return Event{}, false
		}
	}
	info, infoErr := SigInfo(tid)
	ours := infoErr == nil && info.Code() == -6 /* SI_TKILL */ && info.Pid() == os.Getpid()
	if sig == unix.SIGSTOP && (ours || infoErr != nil && th.kicks.Load() > 0) {
		if th.reraised {
			// a SIGSTOP that came during an injected system call, sent
			// again by us when it was done: the user's (a kick of ours
			// pending with it merged into it, and this is its stop too)
			th.reraised = false
			th.kicks.Store(0)
			ev.Kind = EventSignal
			ev.Async = true
			return ev, true
		}
		// ours, whatever the count says: a SIGSTOP of the tracer's is
		// never the program's to receive (a count can be short when
		// StopThread sent it again after a SIGCONT discarded it)
		if th.kicks.Load() > 0 {
			th.kicks.Add(-1)
		}
		ev.Kind = EventKick
		return ev, true
	}
	ev.Kind = EventSignal
	if infoErr == nil {
		ev.Async = info.Async()
		ev.Ours = ours
	}
	return ev, true
}

// isStopSignal reports whether sig stops a process (job control).
func isStopSignal(sig unix.Signal) bool {
	switch sig {
	case unix.SIGSTOP, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU:
		return true
	}
	return false
}

// ptraceInterrupt is PTRACE_INTERRUPT: a seized tracee that runs (or
// listens) stops with PTRACE_EVENT_STOP; one already stopped does so as
// soon as it is resumed.
func ptraceInterrupt(tid int) error {
	if _, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_INTERRUPT, uintptr(tid), 0, 0, 0, 0); errno != 0 {
		return errno
	}
	return nil
}

// kickedListener reports whether a Kick's SIGSTOP went to a thread that
// entered its group-stop meanwhile: it stays pending there (harmless
// while the process is stopped, and the SIGCONT that ends the stop
// discards it), and no stop comes of it.
func (t *Tracer) kickedListener() bool {
	found := false
	for _, th := range t.threads {
		if th.listening.Load() && th.kicks.Load() > 0 {
			th.kicks.Store(0)
			found = true
		}
	}
	return found
}

// interruptListener interrupts a thread left in its group-stop, so that
// Wait reports a stop (a Kick's). It reports whether one was.
func (t *Tracer) interruptListener() bool {
	for _, th := range t.threads {
		if th.listening.Load() && ptraceInterrupt(th.Tid) == nil {
			th.interrupts++
			return true
		}
	}
	return false
}

// Siginfo is a siginfo_t as PTRACE_GETSIGINFO gives it.
type Siginfo [128]byte

func (si *Siginfo) Signo() int { return int(int32(binary.LittleEndian.Uint32(si[0:]))) }
func (si *Siginfo) Code() int  { return int(int32(binary.LittleEndian.Uint32(si[8:]))) }

// Pid is the sender of a signal sent by kill or tgkill.
func (si *Siginfo) Pid() int { return int(int32(binary.LittleEndian.Uint32(si[16:]))) }

// Async reports whether the signal was sent rather than raised by the
// instruction the thread stopped at: a fault (SIGSEGV, SIGBUS, SIGFPE,
// SIGILL, SIGTRAP, SIGSYS) the kernel raised has a positive si_code; the
// same signals sent by kill or tgkill have SI_USER or SI_TKILL.
func (si *Siginfo) Async() bool {
	switch unix.Signal(si.Signo()) {
	case unix.SIGSEGV, unix.SIGBUS, unix.SIGFPE, unix.SIGILL, unix.SIGTRAP, unix.SIGSYS:
		return si.Code() <= 0
	}
	return true
}

// SigInfo reads the siginfo of a thread in a signal-delivery stop.
func SigInfo(tid int) (*Siginfo, error) {
	var si Siginfo
	if _, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_GETSIGINFO, uintptr(tid), 0, uintptr(unsafe.Pointer(&si[0])), 0, 0); errno != 0 {
		return nil, fmt.Errorf("siginfo of %d: %w", tid, errno)
	}
	return &si, nil
}

// SetSigInfo replaces the siginfo of a thread in a signal-delivery stop:
// the signal delivered when it resumes with the same signal number.
func SetSigInfo(tid int, si *Siginfo) error {
	if _, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SETSIGINFO, uintptr(tid), 0, uintptr(unsafe.Pointer(&si[0])), 0, 0); errno != 0 {
		return fmt.Errorf("set siginfo of %d: %w", tid, errno)
	}
	return nil
}

func (t *Tracer) newTracee(tid int, ws unix.WaitStatus) (Event, bool) {
	tgid, ppid, err := procStatusIDs(tid)
	if err != nil {
		// gone already
		return Event{}, false
	}
	if p := t.procs[tgid]; p != nil {
		th := t.addThread(p, tid)
		th.Stopped = true
		return Event{Kind: EventNewThread, Tid: tid, Pid: tgid, Status: ws}, true
	}
	if tgid != tid {
		// a thread of a process we have not met yet: the process's own
		// stop comes first in practice; follow it as part of it
		p, err := t.addProcess(tgid)
		if err != nil {
			return Event{}, false
		}
		th := t.addThread(p, tid)
		th.Stopped = true
		return Event{Kind: EventNewThread, Tid: tid, Pid: tgid, Status: ws}, true
	}
	p, err := t.addProcess(tid)
	if err != nil {
		unix.PtraceDetach(tid) // unchecked: letting go of what could not be kept; it fails only when the thread is gone
		return Event{}, false
	}
	if parent := t.procs[ppid]; parent != nil {
		p.seized = parent.seized // auto-attached children are attached as their parent
	}
	p.Threads[tid].Stopped = true
	return Event{Kind: EventNewProcess, Tid: tid, Pid: tid, Parent: ppid, Status: ws}, true
}

// procStatusIDs reads Tgid and PPid of a task.
func procStatusIDs(tid int) (tgid, ppid int, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", tid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch k {
		case "Tgid":
			tgid, _ = strconv.Atoi(strings.TrimSpace(v))
		case "PPid":
			ppid, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	if tgid == 0 {
		return 0, 0, fmt.Errorf("no Tgid for %d", tid)
	}
	return tgid, ppid, nil
}

// execed handles exec: the other threads are gone, the thread now has the
// process's id, the memory is new.
func (t *Tracer) execed(th *Thread) {
	p := t.procs[th.Pid]
	if p == nil {
		return
	}
	for tid, o := range p.Threads {
		if tid != th.Tid {
			if o.listening.Swap(false) {
				t.listeners--
			}
			delete(t.threads, tid)
			delete(p.Threads, tid)
		}
	}
	if th.Tid != p.Pid {
		// a non-leader thread exec'd: it takes over the leader's id
		delete(t.threads, th.Tid)
		delete(p.Threads, th.Tid)
		th.Tid = p.Pid
		t.threads[th.Tid] = th
		p.Threads[th.Tid] = th
	}
	p.mem.Close()
	if mem, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", p.Pid), os.O_RDWR, 0); err == nil {
		p.mem = mem
	}
}

// resume lets a stopped thread go on. A thread of a group-stopped
// process goes back to its group-stop instead: PTRACE_LISTEN from a
// PTRACE_EVENT_STOP (it stays stopped, and its tracer hears of the
// SIGCONT that ends the stop), else an interrupt that makes it stop again
// at once, before it runs an instruction, to be let listen then.
func (t *Tracer) resume(th *Thread, sig int) error {
	if p := t.procs[th.Pid]; p != nil && p.seized && p.groupStop {
		if th.eventStop && sig == 0 {
			if _, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_LISTEN, uintptr(th.Tid), 0, 0, 0, 0); errno == 0 {
				th.Stopped = false
				th.eventStop = false
				th.listening.Store(true)
				t.listeners++
				return nil
			}
		}
		if ptraceInterrupt(th.Tid) == nil {
			th.relisten = true
		}
	}
	th.Stopped = false
	th.eventStop = false
	th.stepping = false
	if th.SyscallStops {
		return unix.PtraceSyscall(th.Tid, sig)
	}
	return unix.PtraceCont(th.Tid, sig)
}

// Resume lets a stopped thread run, delivering sig (0 for none).
func (t *Tracer) Resume(tid, sig int) error {
	th := t.threads[tid]
	if th == nil {
		return fmt.Errorf("resume %d: not traced", tid)
	}
	if err := t.resume(th, sig); err != nil {
		return fmt.Errorf("resume %d: %w", tid, err)
	}
	return nil
}

// Step single-steps a stopped thread; its next stop is an EventTrap (or a
// signal if the instruction faults).
func (t *Tracer) Step(tid int) error {
	th := t.threads[tid]
	if th == nil {
		return fmt.Errorf("step %d: not traced", tid)
	}
	th.Stopped = false
	th.eventStop = false
	th.stepping = true
	if err := unix.PtraceSingleStep(tid); err != nil {
		return fmt.Errorf("step %d: %w", tid, err)
	}
	return nil
}

// GetRegs reads the registers of a stopped thread.
func (t *Tracer) GetRegs(tid int, r *unix.PtraceRegs) error {
	if err := unix.PtraceGetRegs(tid, r); err != nil {
		return fmt.Errorf("get registers of %d: %w", tid, err)
	}
	return nil
}

// SetRegs writes the registers of a stopped thread.
func (t *Tracer) SetRegs(tid int, r *unix.PtraceRegs) error {
	if err := unix.PtraceSetRegs(tid, r); err != nil {
		return fmt.Errorf("set registers of %d: %w", tid, err)
	}
	return nil
}

// ReadMem reads process memory; a short read is an error.
func (p *Process) ReadMem(addr uint64, b []byte) error {
	if addr > 1<<63-1 {
		return fmt.Errorf("read %#x: address out of range", addr)
	}
	n, err := p.mem.ReadAt(b, int64(addr))
	if n == len(b) {
		return nil
	}
	if err == nil {
		err = errors.New("short read")
	}
	return fmt.Errorf("read %d bytes at %#x of process %d: %w", len(b), addr, p.Pid, err)
}

// WriteMem writes process memory, read-only text included.
func (p *Process) WriteMem(addr uint64, b []byte) error {
	if addr > 1<<63-1 {
		return fmt.Errorf("write %#x: address out of range", addr)
	}
	n, err := p.mem.WriteAt(b, int64(addr))
	if n == len(b) {
		return nil
	}
	if err == nil {
		err = errors.New("short write")
	}
	return fmt.Errorf("write %d bytes at %#x of process %d: %w", len(b), addr, p.Pid, err)
}

// StopThread brings a running thread to a ptrace stop (with a SIGSTOP) and
// returns the events of other kinds it reported before that stop: they
// must still be handled. A thread already stopped is left alone.
func (t *Tracer) StopThread(tid int) ([]Event, error) {
	th := t.threads[tid]
	if th == nil {
		return nil, fmt.Errorf("stop %d: not traced", tid)
	}
	if th.Stopped {
		// its stop may have been taken while waiting for another
		// thread (WaitThread): it is this thread's to report
		return t.unqueue(tid), nil
	}
	if p := t.procs[th.Pid]; p != nil && p.seized && p.groupStop {
		// PTRACE_INTERRUPT: a SIGSTOP would stay pending in a stopped
		// process, and it reaches a thread left in its group-stop. Not
		// for a running one: any other ptrace stop the thread meets
		// first (a watch's SIGTRAP) consumes the interrupt, and with it
		// TestWatchDetach failed (threads taken for stopped ran on); a
		// SIGSTOP that comes after another stop is taken as a kick
		if err := ptraceInterrupt(tid); err != nil {
			return nil, fmt.Errorf("stop %d: %w", tid, err)
		}
		th.interrupts++
	} else {
		th.kicks.Add(1)
		if err := unix.Tgkill(th.Pid, tid, unix.SIGSTOP); err != nil {
			th.kicks.Add(-1)
			return nil, fmt.Errorf("stop %d: %w", tid, err)
		}
	}
	var other []Event
	for {
		ev, err := t.waitThread(tid, func() { t.restop(th) })
		if err != nil {
			return other, err
		}
		switch ev.Kind {
		case EventKick:
			return other, nil
		case EventProcessExit, EventThreadExit:
			return append(other, ev), fmt.Errorf("stop %d: it exited", tid)
		}
		other = append(other, ev)
		if t.threads[tid] == nil {
			return other, fmt.Errorf("stop %d: gone", tid)
		}
		// it stopped for something else first (a breakpoint, a signal):
		// it is stopped now, which is what we wanted; the SIGSTOP is still
		// pending and will come as a kick later
		if th.Stopped {
			return other, nil
		}
	}
}

// idleEvery is how long StopThread waits with nothing reported before it
// looks whether its SIGSTOP is still on its way.
const idleEvery = 20 * time.Millisecond

// restop sends StopThread's SIGSTOP again when it is gone without a
// stop: a SIGCONT sent to the process after it (by a user, or requeued by
// the kernel when gprobes resumed a thread with a SIGCONT it blocks)
// discards every stop signal pending in the process, and waiting for the
// stop would wait for good. Neither pending nor taken (the thread is not
// in a stop the tracer has yet to collect): sent again. A SIGSTOP too
// many comes as a kick, which the engine takes as one.
func (t *Tracer) restop(th *Thread) {
	if th.Stopped || stopPending(th.Pid, th.Tid) || traceStopped(th.Pid, th.Tid) {
		return
	}
	if p := t.procs[th.Pid]; p != nil && p.seized && p.groupStop {
		return // interrupted, not signalled
	}
	th.kicks.Add(1)
	if unix.Tgkill(th.Pid, th.Tid, unix.SIGSTOP) != nil {
		th.kicks.Add(-1)
	}
}

// traceStopped reports whether a thread is in a ptrace stop ('t' in
// /proc/PID/task/TID/stat), one its tracer may not have collected yet.
func traceStopped(pid, tid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 't'
}

func (t *Tracer) stopThread(th *Thread) error {
	evs, err := t.StopThread(th.Tid)
	t.queued = append(t.queued, evs...)
	return err
}

// DrainKick lets a stopped thread run until the SIGSTOP of an earlier Kick
// or StopThread arrives, and stops it there, so it can be detached with no
// SIGSTOP of ours pending (which would stop the process after detach).
// Signals that come first are returned, to deliver at detach. Whether a
// SIGSTOP is pending is read from the thread's pending set in /proc: two
// kicks can collapse into one signal, so counting them is not enough.
func (t *Tracer) DrainKick(tid int) ([]int, error) {
	th := t.threads[tid]
	if th == nil {
		return nil, fmt.Errorf("drain %d: not traced", tid)
	}
	var sigs []int
	if p := t.procs[th.Pid]; p != nil && p.groupStop {
		// a stopped process stays stopped: a SIGSTOP pending does
		// nothing more, and the SIGCONT that ends the stop discards it
		return nil, nil
	}
	for stopPending(th.Pid, tid) {
		if err := t.resume(th, 0); err != nil {
			return sigs, err
		}
		ev, err := t.WaitThread(tid)
		if err != nil {
			return sigs, err
		}
		switch ev.Kind {
		case EventKick:
		case EventSignal:
			if ev.Sig != int(unix.SIGSTOP) || !ev.Ours {
				sigs = append(sigs, ev.Sig)
			}
		case EventProcessExit, EventThreadExit:
			return sigs, fmt.Errorf("drain %d: it exited", tid)
		}
	}
	th.kicks.Store(0)
	return sigs, nil
}

// stopPending reports whether a SIGSTOP sent to this thread (tgkill) is
// pending: bit 19 of SigPnd in /proc/PID/task/TID/status.
func stopPending(pid, tid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/status", pid, tid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "SigPnd:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<(uint(unix.SIGSTOP)-1)) != 0
		}
	}
	return false
}

// unqueue takes the queued events of thread tid out of the queue.
func (t *Tracer) unqueue(tid int) []Event {
	var mine []Event
	keep := t.queued[:0]
	for _, ev := range t.queued {
		if ev.Tid == tid && ev.Kind != EventProcessExit && ev.Kind != EventThreadExit {
			mine = append(mine, ev)
		} else {
			keep = append(keep, ev)
		}
	}
	t.queued = keep
	return mine
}

// Queue hands events back to Wait, to be returned before new ones.
func (t *Tracer) Queue(evs ...Event) { t.queued = append(t.queued, evs...) }

// Detach lets a stopped thread go, delivering sig.
func (t *Tracer) Detach(tid, sig int) error {
	th := t.threads[tid]
	if th == nil {
		return nil
	}
	if sig != 0 {
		// queued while the thread is still stopped, so it is the first
		// thing the thread meets once detached (SIGSTOP for a debugger
		// must stop it before it runs on)
		if err := unix.Tgkill(th.Pid, tid, unix.Signal(sig)); err != nil {
			return fmt.Errorf("detach %d: signal %d for after the detach: %w", tid, sig, err)
		}
	}
	err := unix.PtraceDetach(tid)
	t.removeThread(tid)
	if p := t.procs[th.Pid]; p != nil && len(p.Threads) == 0 {
		p.mem.Close()
		delete(t.procs, th.Pid)
	}
	return err
}

// Auxv reads the process's auxiliary vector.
func Auxv(pid int) (map[uint64]uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/auxv", pid))
	if err != nil {
		return nil, err
	}
	out := map[uint64]uint64{}
	for len(b) >= 16 {
		k, v := binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])
		b = b[16:]
		if k == 0 {
			break
		}
		out[k] = v
	}
	return out, nil
}

// Auxiliary vector keys.
const (
	AtEntry = 9 // AT_ENTRY: the program's entry point
	AtBase  = 7 // AT_BASE: where the dynamic linker is loaded
)

// InjectSyscall runs one system call in a stopped thread of p, at addr
// (which must be executable code no other thread runs: the program's entry
// point), and returns its result. The thread's registers and the two bytes
// at addr are restored.
func (t *Tracer) InjectSyscall(tid int, addr uint64, nr uint64, args ...uint64) (uint64, error) {
	th := t.threads[tid]
	if th == nil || !th.Stopped {
		return 0, fmt.Errorf("inject syscall: thread %d is not stopped", tid)
	}
	p := t.procs[th.Pid]
	var saved unix.PtraceRegs
	if err := t.GetRegs(tid, &saved); err != nil {
		return 0, err
	}
	var code [2]byte
	if err := p.ReadMem(addr, code[:]); err != nil {
		return 0, err
	}
	if err := p.WriteMem(addr, []byte{0x0f, 0x05}); err != nil { // syscall
		return 0, err
	}
	restore := func() {
		// unchecked: both fail only when the thread is gone; the two
		// bytes are at the entry point, which no thread runs again
		p.WriteMem(addr, code[:])
		t.SetRegs(tid, &saved) // unchecked: as above
	}
	r := saved
	r.Rip = addr
	r.Rax = nr
	r.Orig_rax = ^uint64(0) // no syscall restart on these registers
	regs := []*uint64{&r.Rdi, &r.Rsi, &r.Rdx, &r.R10, &r.R8, &r.R9}
	for i, a := range args {
		*regs[i] = a
	}
	if err := t.SetRegs(tid, &r); err != nil {
		restore()
		return 0, err
	}
	if err := t.Step(tid); err != nil {
		restore()
		return 0, err
	}
	var oldMask uint64
	masked := false
	for {
		ev, err := t.WaitThread(tid)
		if err != nil {
			return 0, err
		}
		if ev.Kind == EventTrap {
			break
		}
		if ev.Kind == EventProcessExit || ev.Kind == EventThreadExit {
			// the engine learns of it from Wait
			t.queued = append(t.queued, ev)
			return 0, fmt.Errorf("inject syscall: thread %d exited (%v)", tid, ev.Status)
		}
		if ev.Kind == EventKick {
			// our own SIGSTOP from earlier: keep stepping
			if err := t.Step(tid); err != nil {
				restore()
				return 0, err
			}
			continue
		}
		// a signal arrived before the syscall ran: it goes back to the
		// kernel, blocked until we are done (a signal the thread blocks
		// when resumed with it is requeued, its siginfo kept: a tgkill
		// would make it SI_TKILL, a queued value lost), and try again
		if ev.Kind == EventSignal && ev.Sig != 0 && ev.Sig != int(unix.SIGSTOP) {
			if !masked {
				if err := sigmask(unix.PTRACE_GETSIGMASK, tid, &oldMask); err != nil {
					restore()
					return 0, err
				}
				masked = true
				// unchecked: fails only when the thread is gone
				defer sigmask(unix.PTRACE_SETSIGMASK, tid, &oldMask)
			}
			var m uint64
			if err := sigmask(unix.PTRACE_GETSIGMASK, tid, &m); err != nil {
				restore()
				return 0, err
			}
			m |= 1 << (uint(ev.Sig) - 1)
			if err := sigmask(unix.PTRACE_SETSIGMASK, tid, &m); err != nil {
				restore()
				return 0, err
			}
			th.Stopped = false
			th.eventStop = false
			th.stepping = true
			if _, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SINGLESTEP, uintptr(tid), 0, uintptr(ev.Sig), 0, 0); errno != 0 {
				restore()
				return 0, fmt.Errorf("step %d: %w", tid, errno)
			}
			continue
		}
		if ev.Sig != 0 {
			if ev.Sig == int(unix.SIGSTOP) {
				th.reraised = true
			}
			// unchecked: fails only when the thread is gone, and the signal with it
			defer unix.Tgkill(th.Pid, tid, unix.Signal(ev.Sig))
		}
		if err := t.Step(tid); err != nil {
			restore()
			return 0, err
		}
	}
	var after unix.PtraceRegs
	err := t.GetRegs(tid, &after)
	restore()
	if err != nil {
		return 0, err
	}
	if int64(after.Rax) < 0 && int64(after.Rax) > -4096 {
		return 0, fmt.Errorf("injected syscall %d failed: %w", nr, unix.Errno(-int64(after.Rax)))
	}
	return after.Rax, nil
}
