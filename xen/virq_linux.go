package xen

import (
	"sync"
	"time"
)

// VIRQ_DEBUGGER is global: dom0 may bind it once, and it does not say
// which domain paused. One binding per process serves every Xen target:
// each subscriber is woken at every event and checks its own domain.
var debugVIRQ struct {
	mu   sync.Mutex
	ev   *Events
	subs map[*subscriber]bool
}

type subscriber struct {
	fired chan struct{} // VIRQ_DEBUGGER fired
	kick  chan struct{} // Kick
}

func subscribe() (*subscriber, error) {
	v := &debugVIRQ
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.ev == nil {
		ev, err := BindDebugger()
		if err != nil {
			return nil, err
		}
		v.ev, v.subs = ev, map[*subscriber]bool{}
		go dispatch(ev)
	}
	s := &subscriber{fired: make(chan struct{}, 1), kick: make(chan struct{}, 1)}
	v.subs[s] = true
	return s, nil
}

// dispatch wakes every subscriber at each event, for as long as the
// binding lives (it is kept for the life of the process).
func dispatch(ev *Events) {
	for {
		fired, err := ev.waitFor(time.Hour)
		if err != nil {
			return
		}
		if !fired {
			continue
		}
		debugVIRQ.mu.Lock()
		for s := range debugVIRQ.subs {
			select {
			case s.fired <- struct{}{}:
			default:
			}
		}
		debugVIRQ.mu.Unlock()
	}
}

func (s *subscriber) close() {
	debugVIRQ.mu.Lock()
	delete(debugVIRQ.subs, s)
	debugVIRQ.mu.Unlock()
}

// wait returns true when the VIRQ fired, false on a kick or the timeout.
func (s *subscriber) wait(timeout time.Duration) bool {
	select {
	case <-s.fired:
		return true
	case <-s.kick:
		return false
	case <-time.After(timeout):
		return false
	}
}

func (s *subscriber) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}
