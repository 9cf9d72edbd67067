package testkit

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
)

// The lab lock serializes the labs (QEMU and Xen guests under TCG) of
// every process on the machine: two TCG labs at once starve each other's
// serial consoles and run 10-30 times slower. It is a flock(2) on
// LabLockPath, taken by lab/labkit before it starts a QEMU and given back
// once that QEMU has exited, so a lab test run by hand, a full run of
// scripts/test and another developer's lab test wait for each other,
// whatever started them. Within one process the lock is counted: a test
// that boots two guests at once takes it once.
//
// A process started under `flock -o LOCK go test ...` (the habit before
// the tests took the lock themselves) already holds it through an
// ancestor: LockLab sees that in /proc/locks and does not wait for itself.

// LabLockPath is the lab lock's file: GPROBES_LAB_LOCK, default
// /tmp/lab.lock.
func LabLockPath() string {
	if p := os.Getenv("GPROBES_LAB_LOCK"); p != "" {
		return p
	}
	return "/tmp/lab.lock"
}

var labLock struct {
	mu    sync.Mutex // held while taking the flock, so one goroutine waits for it
	count int
	f     *os.File // the flock's descriptor; nil when an ancestor holds it
	held  atomic.Bool
	// waiting counts the goroutines waiting for the lock (for the watchdog)
	waiting atomic.Int32
}

// LockLab takes the lab lock (see above), waiting for it as long as
// another process holds it; while it waits, the per-test watchdog does not
// count the time (a test queued behind another's lab is not hung). It
// says on stderr whom it waits for. release gives it back; call it once.
func LockLab() (release func(), err error) {
	labLock.waiting.Add(1) // a goroutine waiting for another's lock here waits too
	labLock.mu.Lock()
	labLock.waiting.Add(-1)
	defer labLock.mu.Unlock()
	if labLock.count == 0 {
		f, err := lockLab(LabLockPath())
		if err != nil {
			return nil, fmt.Errorf("the lab lock %s: %w", LabLockPath(), err)
		}
		labLock.f = f
		labLock.held.Store(true)
	}
	labLock.count++
	var once sync.Once
	return func() { once.Do(unlockLab) }, nil
}

func unlockLab() {
	labLock.mu.Lock()
	defer labLock.mu.Unlock()
	labLock.count--
	if labLock.count == 0 {
		labLock.held.Store(false)
		if labLock.f != nil {
			labLock.f.Close() // closing the last descriptor drops the flock
			labLock.f = nil
		}
	}
}

// HoldingLab reports whether this process holds the lab lock now.
func HoldingLab() bool { return labLock.held.Load() }
