package xen

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// The hypervisor's news reaches dom0 two ways, both global: VIRQ_DEBUGGER
// (a debugged domain paused on a debug trap; dom0 may bind it once, and it
// does not say which domain) and xenstore's @releaseDomain watch (some
// domain went; it does not say which either). One binding and one watch
// per process serve every Xen target: each subscriber is woken at every
// event and checks its own domain with one getdomaininfo hypercall.
var hub struct {
	mu       sync.Mutex
	virq     *Events
	virqErr  error
	watch    io.Closer
	watchErr error
	subs     map[*subscriber]bool
}

type subscriber struct {
	fired chan struct{} // VIRQ_DEBUGGER or @releaseDomain fired
	kick  chan struct{} // Kick
	virq  bool          // the VIRQ binding is live: debug traps wake us,
	watch bool          // the xenstore watch is live: deaths wake us (both under hub.mu)
}

// subscribe joins the hub, binding the VIRQ and setting the watch the
// first time (and again after a failure). A failure of either is not
// fatal: the target then polls for what it cannot hear of.
func subscribe() *subscriber {
	h := &hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs == nil {
		h.subs = map[*subscriber]bool{}
	}
	if h.virq == nil {
		if h.virq, h.virqErr = BindDebugger(); h.virqErr == nil {
			go dispatchVIRQ(h.virq)
		} else {
			fmt.Fprintf(os.Stderr, "gprobes: %v: breakpoint stops found by a state check every millisecond\n", h.virqErr)
		}
	}
	if h.watch == nil {
		if h.watch, h.watchErr = watchReleases(wakeAll, watchEnded); h.watchErr != nil {
			fmt.Fprintf(os.Stderr, "gprobes: %v: deaths found by a state check\n", h.watchErr)
		}
	}
	s := &subscriber{fired: make(chan struct{}, 1), kick: make(chan struct{}, 1), virq: h.virq != nil, watch: h.watch != nil}
	h.subs[s] = true
	return s
}

// dispatchVIRQ wakes every subscriber at each event, for as long as the
// binding lives (it is kept for the life of the process).
func dispatchVIRQ(ev *Events) {
	for {
		fired, err := ev.waitFor(time.Hour)
		if err != nil {
			hub.mu.Lock()
			hub.virq, hub.virqErr = nil, err
			for s := range hub.subs {
				s.virq = false
			}
			hub.mu.Unlock()
			return
		}
		if fired {
			wakeAll()
		}
	}
}

// watchEnded: xenstored went away (restarted?). The subscribers poll for
// deaths from their next wake-up, which this is; the next subscribe
// watches again.
func watchEnded() {
	hub.mu.Lock()
	hub.watch = nil
	for s := range hub.subs {
		s.watch = false
	}
	hub.mu.Unlock()
	wakeAll()
}

func wakeAll() {
	hub.mu.Lock()
	for s := range hub.subs {
		select {
		case s.fired <- struct{}{}:
		default:
		}
	}
	hub.mu.Unlock()
}

// live says which news reaches the subscriber.
func (s *subscriber) live() (virq, watch bool) {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	return s.virq, s.watch
}

// alone says whether s is the only target of this process: then a
// VIRQ_DEBUGGER is most likely its domain's.
func (s *subscriber) alone() bool {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	return len(hub.subs) == 1
}

func (s *subscriber) close() {
	hub.mu.Lock()
	delete(hub.subs, s)
	hub.mu.Unlock()
}

// wait returns true when an event fired, false on a kick or the timeout
// (0: none).
func (s *subscriber) wait(timeout time.Duration) bool {
	var after <-chan time.Time
	if timeout > 0 {
		tm := time.NewTimer(timeout)
		defer tm.Stop()
		after = tm.C
	}
	select {
	case <-s.fired:
		return true
	case <-s.kick:
		return false
	case <-after:
		return false
	}
}

// pending takes an event that has come, without waiting.
func (s *subscriber) pending() bool {
	select {
	case <-s.fired:
		return true
	default:
		return false
	}
}

func (s *subscriber) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}
