package engine_test

import (
	"sync"
	"testing"
	"time"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/rpn"
)

// stubTarget is a target with one thread whose events the test sends, and
// whose Kick, like a GDB stub's or a hypervisor's, does nothing while the
// thread is stopped. onResume runs inside Resume before the thread counts
// as running: the window between the engine's last look at its commands
// and the target running again.
type stubTarget struct {
	events   chan engine.Event
	mu       sync.Mutex
	running  bool
	onResume func()
	kicks    int // kicks that stopped the thread
	lost     int // kicks that came while it was stopped
	lostCh   chan struct{}
}

func newStubTarget() *stubTarget {
	return &stubTarget{events: make(chan engine.Event, 8), lostCh: make(chan struct{}, 8)}
}

func (s *stubTarget) Wait() (engine.Event, error) {
	ev := <-s.events
	s.mu.Lock()
	s.running = false
	s.mu.Unlock()
	return ev, nil
}

func (s *stubTarget) Kick() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		s.lost++
		select {
		case s.lostCh <- struct{}{}:
		default:
		}
		return false
	}
	s.kicks++
	s.running = false
	s.events <- engine.Event{Kind: engine.EvKick, Tid: 1, Space: 1}
	return true
}

func (s *stubTarget) Resume(tid, sig int) error {
	s.mu.Lock()
	hook := s.onResume
	s.onResume = nil
	s.mu.Unlock()
	if hook != nil {
		hook()
	}
	s.mu.Lock()
	s.running = true
	s.mu.Unlock()
	return nil
}

func (s *stubTarget) ReadMem(int, uint64, []byte) error  { return engine.ErrNoXOL }
func (s *stubTarget) WriteMem(int, uint64, []byte) error { return engine.ErrNoXOL }
func (s *stubTarget) GetRegs(int, *engine.Regs) error    { return nil }
func (s *stubTarget) SetRegs(int, *engine.Regs) error    { return nil }
func (s *stubTarget) Step(int) error                     { return nil }
func (s *stubTarget) StopThread(int) ([]engine.Event, error) {
	return nil, nil
}
func (s *stubTarget) DrainKick(int) ([]int, error)                      { return nil, nil }
func (s *stubTarget) Detach(int, int) error                             { return nil }
func (s *stubTarget) Threads(int) []int                                 { return []int{1} }
func (s *stubTarget) Spaces() []int                                     { return []int{1} }
func (s *stubTarget) AllocXOL(int, int, uint64, uint64) (uint64, error) { return 0, engine.ErrNoXOL }
func (s *stubTarget) ThreadIndex(int) int                               { return 0 }
func (s *stubTarget) IsStopped(int) bool                                { return true }
func (s *stubTarget) Dump(int, int, string) (string, error)             { return "", engine.ErrNoXOL }
func (s *stubTarget) InsertBreakpoint(int, uint64, []byte) error        { return nil }
func (s *stubTarget) RemoveBreakpoint(int, uint64, []byte) error        { return nil }
func (s *stubTarget) TrapPC(_ int, rip uint64) uint64                   { return rip }
func (s *stubTarget) Kernel() bool                                      { return false }
func (s *stubTarget) Check(*rpn.Module) string                          { return "" }
func (s *stubTarget) Resolve(int, string, rpn.ModType) (*engine.Loaded, bool, error) {
	return nil, false, nil
}
func (s *stubTarget) Rendezvous(int) []uint64   { return nil }
func (s *stubTarget) Writable(int, uint64) bool { return false }
func (s *stubTarget) Sys(int, *engine.Regs, rpn.SysValue) (uint64, bool) {
	return 0, false
}
func (s *stubTarget) UserReg(int, *engine.Regs, rpn.Reg) (uint64, bool) { return 0, false }
func (s *stubTarget) OS() engine.OS                                     { return s }

// A command that comes after the engine ran its commands but before the
// target runs again finds Kick doing nothing: the engine must kick once the
// target runs, or the command waits for a stop that may never come (the
// remove hang of the Xen lab: a probe that is not hit again).
func TestCommandQueuedWhileResuming(t *testing.T) {
	tg := newStubTarget()
	eng, err := engine.Start(func() (engine.Target, error) { return tg, nil }, engine.Options{Warn: func(string) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		// let Close through whatever happens above
		go func() {
			for range time.Tick(10 * time.Millisecond) {
				if tg.Kick() {
					return
				}
			}
		}()
		eng.Close()
	}()
	if err := eng.Release(); err != nil {
		t.Fatal(err)
	}
	queried := make(chan struct{})
	tg.mu.Lock()
	tg.onResume = func() {
		go func() {
			eng.Query()
			close(queried)
		}()
		<-tg.lostCh // the command is queued, and its kick was lost
	}
	tg.mu.Unlock()
	// a signal: the engine resumes the thread to deliver it
	tg.events <- engine.Event{Kind: engine.EvSignal, Tid: 1, Space: 1, Sig: 10}
	select {
	case <-queried:
	case <-time.After(10 * time.Second):
		t.Fatal("a command queued while the target was being resumed waits for a stop that never comes")
	}
	tg.mu.Lock()
	defer tg.mu.Unlock()
	if tg.lost != 1 || tg.kicks != 1 {
		t.Errorf("kicks: %d lost while stopped, %d that stopped the target; want 1 and 1", tg.lost, tg.kicks)
	}
}

// warnTarget is a stub target with warnings of its own (engine.Warner).
type warnTarget struct {
	*stubTarget
	warn func(string)
}

func (w *warnTarget) SetWarn(f func(string)) { w.warn = f }

// A backend's warnings reach the user's Options.Warn: the engine hands it
// over before the first Wait.
func TestWarnerGetsOptionsWarn(t *testing.T) {
	tg := &warnTarget{stubTarget: newStubTarget()}
	got := make(chan string, 1)
	eng, err := engine.Start(func() (engine.Target, error) { return tg, nil }, engine.Options{Warn: func(m string) { got <- m }})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		go func() {
			for range time.Tick(10 * time.Millisecond) {
				if tg.Kick() {
					return
				}
			}
		}()
		eng.Close()
	}()
	if tg.warn == nil {
		t.Fatal("the engine did not call SetWarn")
	}
	tg.warn("domain 7 may stay paused")
	select {
	case m := <-got:
		if m != "domain 7 may stay paused" {
			t.Fatalf("Options.Warn got %q", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the backend's warning did not reach Options.Warn")
	}
}

// describedTarget is a stub target whose OS says what it is
// (engine.Describer), as a guest kernel's does.
type describedTarget struct{ *stubTarget }

type describedOS struct{ *stubTarget }

func (d describedTarget) OS() engine.OS { return describedOS{d.stubTarget} }
func (describedOS) Describe() string    { return "Linux 6.1 (symbols from memory)" }

// The engine finds its target's abilities once, when it opens it: the
// OS's Describer answers Describe, from outside the loop; a target
// without one answers "".
func TestDescribeFromAbilities(t *testing.T) {
	for _, c := range []struct {
		tg   engine.Target
		want string
	}{
		{describedTarget{newStubTarget()}, "Linux 6.1 (symbols from memory)"},
		{newStubTarget(), ""},
	} {
		tg := c.tg
		eng, err := engine.Start(func() (engine.Target, error) { return tg, nil }, engine.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := eng.Describe(); got != c.want {
			t.Errorf("Describe %q, want %q", got, c.want)
		}
		go func() {
			for range time.Tick(10 * time.Millisecond) {
				if tg.Kick() {
					return
				}
			}
		}()
		eng.Close()
	}
}
