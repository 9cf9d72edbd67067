package tsc

import (
	"math/big"
	"testing"
	"time"

	"github.com/gprobes/gprobes/internal/testkit"
)

// counter is a made-up time stamp counter: num/den ticks a nanosecond from
// base at the epoch time t0.
type counter struct {
	t0       time.Time
	base     uint64
	num, den uint64
}

func (k counter) at(t time.Time) uint64 {
	ns := t.Sub(k.t0).Nanoseconds()
	return k.base + uint64(ns)*k.num/k.den
}

// exact is the time of counter value v by the counter's true rate.
func (k counter) exact(v uint64) time.Time {
	d := new(big.Int).Sub(new(big.Int).SetUint64(v), new(big.Int).SetUint64(k.base))
	d.Mul(d, new(big.Int).SetUint64(k.den))
	d.Quo(d, new(big.Int).SetUint64(k.num))
	return k.t0.Add(time.Duration(d.Int64()))
}

// The conversion from two samples: the anchor converts exactly, and every
// other value within what the 32.32 rate's rounding allows (a tick of the
// rate is 2^-32 ns, so |error| <= ticks from the anchor / 2^32 + 1 ns,
// plus the rate the samples' own rounding gives).
func TestBetween(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	for _, k := range []counter{
		{t0, 1 << 40, 5, 2},           // 2.5 GHz
		{t0, 1<<45 + 123456789, 3, 1}, // 3 GHz
		{t0, 1 << 43, 1, 1},           // 1 GHz
		{t0, 1 << 62, 4_200, 1000},    // 4.2 GHz, a counter far from zero
	} {
		t1 := t0.Add(20 * time.Millisecond)
		c, ok := between(t0, k.at(t0), t1, k.at(t1))
		if !ok {
			t.Fatalf("%+v: no calibration", k)
		}
		if c.TSC0 != k.at(t1) || c.NS0 != uint64(t1.UnixNano()) {
			t.Fatalf("%+v: anchored at %d, %d", k, c.TSC0, c.NS0)
		}
		if got := c.Nanos(c.TSC0); got != t1.UnixNano() {
			t.Fatalf("%+v: the anchor converts to %d, not %d", k, got, t1.UnixNano())
		}
		for _, off := range []time.Duration{-time.Hour, -time.Second, -1, 0, 1, 17 * time.Millisecond, time.Hour, 24 * time.Hour} {
			v := k.at(t1.Add(off))
			got := c.Time(v)
			want := k.exact(v)
			// the rate from 20 ms of samples is off by at most one
			// nanosecond in 20 ms (the counter's value is truncated)
			bound := roundingBound(c, v) + time.Duration(float64(off.Abs())/float64(20*time.Millisecond))
			if d := got.Sub(want).Abs(); d > bound {
				t.Errorf("%+v: %v from the anchor converts to %v, want %v (%v off, bound %v)", k, off, got, want, d, bound)
			}
		}
	}
}

// roundingBound is how far the 32.32 rate's rounding can put the
// conversion of v: a rate tick (2^-32 ns) per counter tick from the
// anchor, and a nanosecond of truncation either way.
func roundingBound(c Cal, v uint64) time.Duration {
	ticks := v - c.TSC0
	if int64(ticks) < 0 {
		ticks = -ticks
	}
	return time.Duration(ticks>>c.Shift) + 2
}

func TestBetweenRefuses(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		name   string
		t1     time.Time
		c0, c1 uint64
	}{
		{"no time", t0, 1, 2},
		{"no ticks", t0.Add(time.Second), 5, 5},
		{"time backwards", t0.Add(-time.Second), 1, 2},
		{"counter backwards", t0.Add(time.Second), 10, 5},
		{"slower than a tick in 2^32 ns", t0.Add(time.Hour), 0, 1},
	} {
		if cal, ok := between(t0, c.c0, c.t1, c.c1); ok {
			t.Errorf("%s: calibrated %+v", c.name, cal)
		}
	}
}

// Refine recomputes the rate over the whole baseline: a first calibration
// whose 20 ms window the scheduler stretched by 50 µs (a rate 0.25% off)
// converts a value an hour later 9 s wrong; refined an hour in, the same
// value converts within 2 ns, and the first sample within the rate's
// rounding (2.5 µs an hour back at 3 GHz). Refine does nothing less than a second after
// the last refinement.
func TestClockRefine(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	k := counter{t0, 1 << 40, 3, 1}
	t1 := t0.Add(20 * time.Millisecond)
	// the wall clock read 50 µs late at the end of the window
	cal, ok := between(t0, k.at(t0), t1.Add(50*time.Microsecond), k.at(t1))
	if !ok {
		t.Fatal("no calibration")
	}
	now := t1
	c := &Clock{c0: k.at(t0), t0: t0, cal: cal, ok: true, refine: t1,
		sample: func() (time.Time, uint64) { return now, k.at(now) }}
	later := t0.Add(time.Hour)
	v := k.at(later)
	before := c.Time(v).Sub(later).Abs()
	if before < 8*time.Second {
		t.Fatalf("the skewed calibration is only %v off an hour later; the test's premise is wrong", before)
	}
	now = t1.Add(999 * time.Millisecond)
	c.Refine()
	if c.Cal() != cal {
		t.Fatalf("refined %v after the last refinement", now.Sub(t1))
	}
	now = later
	c.Refine()
	if c.Cal() == cal {
		t.Fatal("not refined an hour in")
	}
	if d := c.Time(v).Sub(later).Abs(); d > 2 {
		t.Errorf("refined: %v off (was %v)", d, before)
	}
	if d, bound := c.Time(k.at(t0)).Sub(t0).Abs(), roundingBound(c.Cal(), k.at(t0)); d > bound {
		t.Errorf("refined: the first sample converts %v off, bound %v", d, bound)
	}
	// a clock without a counter never refines
	c2 := &Clock{sample: func() (time.Time, uint64) { t.Fatal("sampled without a counter"); return time.Time{}, 0 }}
	c2.Refine()
}

// The real counter calibrates on this machine: a rate, the anchor
// converting to its own wall-clock sample. (How close the conversion comes
// to time.Now is a measurement, not a test: BenchmarkCalibrationError.)
func TestCalibrate(t *testing.T) {
	if !have {
		testkit.SkipOrFail(t, "no time stamp counter on this architecture")
	}
	c, ok := Calibrate(time.Millisecond)
	if !ok || c.Mult == 0 || c.Shift != shift {
		t.Fatalf("Calibrate = %+v, %v", c, ok)
	}
	if c.Nanos(c.TSC0) != int64(c.NS0) {
		t.Fatalf("TSC0 converts to %d, not NS0 %d", c.Nanos(c.TSC0), c.NS0)
	}
	if v1, v2 := Read(), Read(); v2 < v1 {
		t.Errorf("the counter went back: %d then %d", v1, v2)
	}
}

// BenchmarkCalibrationError reports how far a 20 ms calibration converts
// the counter from time.Now, 30 ms later (ns, the mean of the runs'
// absolute errors).
func BenchmarkCalibrationError(b *testing.B) {
	if !have {
		b.Skip("no time stamp counter on this architecture")
	}
	var sum time.Duration
	for i := 0; i < b.N; i++ {
		c, ok := Calibrate(20 * time.Millisecond)
		if !ok {
			b.Fatal("no calibration")
		}
		time.Sleep(30 * time.Millisecond)
		now, v := time.Now(), Read()
		sum += c.Time(v).Sub(now).Abs()
	}
	b.ReportMetric(float64(sum.Nanoseconds())/float64(b.N), "ns-error")
}

// A sample of the two clocks is the wall clock with the counter read
// around it: a preemption between the reads (8 ms here, on the first
// try) is left out, where pairing the wall clock with the next counter
// read (as the calibration did) is off by the whole preemption.
func TestBracketed(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 11, 40, 0, 0, time.UTC)
	k := counter{t0, 1 << 40, 5, 2} // 2.5 GHz
	clock := t0                     // the true time: 30 ns a read
	preempt := 8 * time.Millisecond // at the second counter read
	reads := 0
	now := func() time.Time { clock = clock.Add(30); return clock }
	read := func() uint64 {
		reads++
		if reads == 2 {
			clock = clock.Add(preempt)
		}
		clock = clock.Add(30)
		return k.at(clock)
	}
	// the way it was: the wall clock, then the counter (preempted
	// before it: the second read)
	reads = 1
	w, c := now(), read()
	reads = 0
	if got := k.exact(c).Sub(w); got < preempt/2 {
		t.Fatalf("the made-up preemption does not bite a plain sample (off by %v)", got)
	}
	w, c = bracketed(now, read)
	if off := k.exact(c).Sub(w).Abs(); off > 100*time.Nanosecond {
		t.Errorf("bracketed sample off by %v, want at most 100 ns", off)
	}
	if reads != 2*bracketTries {
		t.Errorf("%d counter reads, want %d", reads, 2*bracketTries)
	}
}
