// Package tsc reads the time stamp counter, which jump pads stamp their
// records with (rdtsc costs about 10 ns where clock_gettime in a pad would
// need the vDSO), and converts it to time.
package tsc

import (
	"math/bits"
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
	t0, c0 := time.Now(), Read()
	time.Sleep(d)
	t1, c1 := time.Now(), Read()
	dt := uint64(t1.Sub(t0).Nanoseconds())
	dc := c1 - c0
	if dc == 0 || dt == 0 {
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
