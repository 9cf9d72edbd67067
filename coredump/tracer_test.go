//go:build linux && amd64

package coredump

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/gprobes/gprobes/internal/testkit"
)

// This file holds what the tests need to play the engine: a real target
// process and a ptrace tracer on one locked OS thread.

const (
	ptraceGetFPRegs = 14
	ptraceSeize     = 0x4206
	ptraceInterrupt = 0x4207
	ptraceEventStop = 128
)

// targetBinary builds testdata/target.c once per test run.
func targetBinary(t *testing.T) string {
	t.Helper()
	return testkit.CC(t, "target", "-g", "-O0", "-pthread", "testdata/target.c")
}

func TestMain(m *testing.M) { testkit.Main(m) }

// target is a running test program.
type target struct {
	bin    string
	cmd    *exec.Cmd
	pid    int
	addr   map[string]uint64 // string, heap, ticks, guard, short, secret
	lines  chan string
	tr     *tracer
	waited bool
}

// startTarget starts the program, waits until its three threads run, and
// attaches a tracer (not yet stopping anything).
func startTarget(t *testing.T) *target {
	t.Helper()
	bin := targetBinary(t)
	cmd := exec.Command(bin, filepath.Join(t.TempDir(), "data"))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tg := &target{bin: bin, cmd: cmd, pid: cmd.Process.Pid, addr: map[string]uint64{}, lines: make(chan string, 1024)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case tg.lines <- sc.Text():
			default: // nobody listening: drop, the program must not block
			}
		}
		close(tg.lines)
	}()
	tg.tr = newTracer()
	t.Cleanup(func() {
		tg.kill(t)
		tg.tr.close()
	})
	ready := tg.next(t, "ready")
	for _, f := range strings.Fields(ready)[1:] {
		k, v, _ := strings.Cut(f, "=")
		a, err := strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 64)
		if err != nil {
			t.Fatalf("bad ready line %q", ready)
		}
		tg.addr[k] = a
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		ids, _ := taskIDs(tg.pid)
		if len(ids) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("target has threads %v, want 3", ids)
		}
		time.Sleep(time.Millisecond)
	}
	return tg
}

// next returns the next output line that starts with prefix.
func (tg *target) next(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-tg.lines:
			if !ok {
				t.Fatalf("target's output ended before %q", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			t.Fatalf("no %q line from the target in 10 s", prefix)
		}
	}
}

// tick returns the number of the next "tick N" line.
func (tg *target) tick(t *testing.T) int64 {
	t.Helper()
	l := tg.next(t, "tick ")
	n, err := strconv.ParseInt(strings.TrimPrefix(l, "tick "), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// stop stops every thread and gathers them, the thread with TID first
// first (0: the leader). It returns a Process with Mem open.
func (tg *target) stop(t *testing.T, first int) *Process {
	t.Helper()
	var threads []Thread
	err := tg.tr.do(func() error {
		if err := tg.tr.seizeAll(tg.pid); err != nil {
			return err
		}
		var err error
		threads, err = tg.tr.gather()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if first == 0 {
		first = tg.pid
	}
	for i, th := range threads {
		if th.TID == first {
			threads[0], threads[i] = threads[i], threads[0]
		}
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", tg.pid))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	return &Process{PID: tg.pid, Threads: threads, Mem: mem}
}

// resume detaches every thread: the program runs on.
func (tg *target) resume(t *testing.T) {
	t.Helper()
	if err := tg.tr.do(func() error { return tg.tr.detachAll() }); err != nil {
		t.Fatal(err)
	}
}

// kill kills the stopped program and reaps it: the tracer reaps the other
// threads first (the leader is reported only after them), then cmd.Wait
// the leader.
func (tg *target) kill(t *testing.T) {
	t.Helper()
	syscall.Kill(tg.pid, syscall.SIGKILL)
	tg.tr.do(func() error {
		for _, tid := range tg.tr.tids {
			if tid != tg.pid {
				var ws syscall.WaitStatus
				syscall.Wait4(tid, &ws, syscall.WALL, nil)
			}
		}
		tg.tr.tids = nil
		return nil
	})
	if !tg.waited {
		tg.waited = true
		tg.cmd.Wait()
	}
}

// tracer runs every ptrace request on one locked OS thread, as Linux
// requires: a tracee answers only the thread that attached it.
type tracer struct {
	work chan func()
	tids []int // seized threads
}

func newTracer() *tracer {
	tr := &tracer{work: make(chan func())}
	go func() {
		runtime.LockOSThread()
		for f := range tr.work {
			f()
		}
	}()
	return tr
}

func (tr *tracer) do(f func() error) error {
	done := make(chan error)
	tr.work <- func() { done <- f() }
	return <-done
}

func (tr *tracer) close() { close(tr.work) }

func ptrace(req, tid int, addr, data uintptr) error {
	_, _, e := syscall.Syscall6(syscall.SYS_PTRACE, uintptr(req), uintptr(tid), addr, data, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// seizeAll seizes and interrupts every thread of pid until no new thread
// appears, waiting for each to reach its event stop.
func (tr *tracer) seizeAll(pid int) error {
	seized := map[int]bool{}
	for {
		ids, err := taskIDs(pid)
		if err != nil {
			return err
		}
		added := false
		for _, tid := range ids {
			if seized[tid] {
				continue
			}
			if err := ptrace(ptraceSeize, tid, 0, 0); err != nil {
				return fmt.Errorf("PTRACE_SEIZE %d: %w", tid, err)
			}
			seized[tid] = true
			tr.tids = append(tr.tids, tid)
			if err := ptrace(ptraceInterrupt, tid, 0, 0); err != nil {
				return fmt.Errorf("PTRACE_INTERRUPT %d: %w", tid, err)
			}
			var ws syscall.WaitStatus
			if _, err := syscall.Wait4(tid, &ws, syscall.WALL, nil); err != nil {
				return fmt.Errorf("wait %d: %w", tid, err)
			}
			if !ws.Stopped() || ws.TrapCause() != ptraceEventStop {
				return fmt.Errorf("thread %d: unexpected wait status %#x", tid, uint32(ws))
			}
			added = true
		}
		if !added {
			return nil
		}
	}
}

func (tr *tracer) gather() ([]Thread, error) {
	var out []Thread
	for _, tid := range tr.tids {
		th := Thread{TID: tid, FPRegs: make([]byte, 512)}
		if err := syscall.PtraceGetRegs(tid, &th.Regs); err != nil {
			return nil, fmt.Errorf("PTRACE_GETREGS %d: %w", tid, err)
		}
		if err := ptrace(ptraceGetFPRegs, tid, 0, uintptr(unsafe.Pointer(&th.FPRegs[0]))); err != nil {
			return nil, fmt.Errorf("PTRACE_GETFPREGS %d: %w", tid, err)
		}
		out = append(out, th)
	}
	return out, nil
}

func (tr *tracer) detachAll() error {
	var first error
	for _, tid := range tr.tids {
		if err := syscall.PtraceDetach(tid); err != nil && first == nil {
			first = fmt.Errorf("PTRACE_DETACH %d: %w", tid, err)
		}
	}
	tr.tids = nil
	return first
}
