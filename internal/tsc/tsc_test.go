package tsc

import (
	"testing"
	"time"
)

// The calibration converts the counter to the wall clock: a value read
// now converts to within a millisecond of time.Now.
func TestCalibrate(t *testing.T) {
	c, ok := Calibrate(20 * time.Millisecond)
	if !ok {
		t.Skip("no time stamp counter on this architecture")
	}
	time.Sleep(30 * time.Millisecond)
	now, v := time.Now(), Read()
	if d := c.Time(v).Sub(now); d > time.Millisecond || d < -time.Millisecond {
		t.Fatalf("counter says %v, clock says %v (%v apart)", c.Time(v), now, d)
	}
	if c.Nanos(c.TSC0) != int64(c.NS0) {
		t.Fatalf("TSC0 converts to %d, not NS0 %d", c.Nanos(c.TSC0), c.NS0)
	}
}

// A refined clock still converts the counter to the wall clock.
func TestClockRefine(t *testing.T) {
	c, ok := NewClock(5 * time.Millisecond)
	if !ok {
		t.Skip("no time stamp counter on this architecture")
	}
	c.refine = time.Time{} // allow a refinement now
	time.Sleep(50 * time.Millisecond)
	c.Refine()
	now, v := time.Now(), Read()
	if d := c.Time(v).Sub(now); d > time.Millisecond || d < -time.Millisecond {
		t.Fatalf("refined clock: %v apart from time.Now", d)
	}
}
