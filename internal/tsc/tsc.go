// Package tsc reads the time stamp counter, which jump pads stamp their
// records with (rdtsc costs about 10 ns where clock_gettime in a pad would
// need the vDSO), and converts it to time.
package tsc

import (
	"math/bits"
	"sync"
	"time"
)

// Cal converts counter values to nanoseconds since the Unix epoch:
// ns = NS0 + ((tsc - TSC0) * Mult) >> Shift.
type Cal struct {
	TSC0, NS0, Mult, Shift uint64
}

// Shift is the fixed point of Mult.
const shift = 32

// Calibrate measures the counter against the wall clock over d. ok is false
// where there is no counter (not amd64).
func Calibrate(d time.Duration) (Cal, bool) {
	if !have {
		return Cal{}, false
	}
	t0, c0 := sampleNow()
	time.Sleep(d)
	t1, c1 := sampleNow()
	return between(t0, c0, t1, c1)
}

// bracketTries is how many times bracketed reads the two clocks.
const bracketTries = 16

// bracketed samples the wall clock and the counter at one moment: it
// reads the counter, the wall clock, the counter again, bracketTries
// times, and keeps the wall clock whose two counter reads are closest,
// with their midpoint. A thread preempted between two reads (a busy
// machine, a VM: milliseconds) would otherwise pair the wall clock with a
// counter value from milliseconds later, and every time converted from
// that calibration would be off by as much.
func bracketed(now func() time.Time, read func() uint64) (time.Time, uint64) {
	var bt time.Time
	var bc uint64
	best := ^uint64(0)
	for range bracketTries {
		a := read()
		t := now()
		b := read()
		if b < a || b-a >= best {
			continue
		}
		best, bt, bc = b-a, t, a+(b-a)/2
	}
	if best == ^uint64(0) {
		// the counter went back every time (never on one machine)
		return now(), read()
	}
	return bt, bc
}

// between is the calibration from two samples of the wall clock and the
// counter, anchored at the second: its rate is (t1-t0)/(c1-c0) in 32.32
// fixed point. ok is false when the samples give no rate.
func between(t0 time.Time, c0 uint64, t1 time.Time, c1 uint64) (Cal, bool) {
	dt := uint64(t1.Sub(t0).Nanoseconds())
	dc := c1 - c0
	if dc == 0 || dt == 0 || t1.Before(t0) || int64(dc) < 0 {
		return Cal{}, false
	}
	// mult = dt << shift / dc
	hi, lo := bits.Mul64(dt, 1<<shift)
	if hi >= dc {
		return Cal{}, false
	}
	mult, _ := bits.Div64(hi, lo, dc)
	return Cal{TSC0: c1, NS0: uint64(t1.UnixNano()), Mult: mult, Shift: shift}, true
}

// Nanos converts a counter value.
func (c Cal) Nanos(v uint64) int64 {
	d := v - c.TSC0
	neg := int64(d) < 0
	if neg {
		d = -d
	}
	hi, lo := bits.Mul64(d, c.Mult)
	ns := hi<<(64-c.Shift) | lo>>c.Shift
	if neg {
		return int64(c.NS0) - int64(ns)
	}
	return int64(c.NS0) + int64(ns)
}

// Time converts a counter value to a time.
func (c Cal) Time(v uint64) time.Time { return time.Unix(0, c.Nanos(v)) }

// Clock converts counter values to time with a calibration it refines:
// its first one (Calibrate, over a few milliseconds) is off by some parts
// in 100,000, which over an hour of records is a skew of a tenth of a
// second; Refine recomputes the rate from the first sample to now, so the
// error falls as the baseline grows. Safe for concurrent use.
type Clock struct {
	mu     sync.Mutex
	c0     uint64
	t0     time.Time
	cal    Cal
	ok     bool
	refine time.Time
	sample func() (time.Time, uint64) // the wall clock and the counter now; tests replace it
}

func sampleNow() (time.Time, uint64) { return bracketed(time.Now, Read) }

// NewClock calibrates a clock; ok is false without a counter.
func NewClock(d time.Duration) (*Clock, bool) {
	t0, c0 := sampleNow()
	cal, ok := Calibrate(d)
	return &Clock{c0: c0, t0: t0, cal: cal, ok: ok, refine: time.Now(), sample: sampleNow}, ok
}

// Cal is the current calibration.
func (c *Clock) Cal() Cal {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cal
}

// Time converts a counter value.
func (c *Clock) Time(v uint64) time.Time { return c.Cal().Time(v) }

// Refine recomputes the rate over the whole baseline, at most once a
// second.
func (c *Clock) Refine() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ok {
		return
	}
	t1, c1 := c.sample()
	if t1.Sub(c.refine) < time.Second {
		return
	}
	if cal, ok := between(c.t0, c.c0, t1, c1); ok {
		c.cal = cal
		c.refine = t1
	}
}
