package timeline

import (
	"slices"
	"time"

	"github.com/gprobes/gprobes/probe"
)

// Defaults of the Builder's bounds.
const (
	// DefaultWindow is how long, in record time, a thread's records are
	// held to be put in order: a jump pad's ring is drained every
	// millisecond or so, far within it.
	DefaultWindow = time.Second
	// DefaultMaxHeld is how many records of a thread are held behind an
	// open call (an entry whose return has not come) before the outermost
	// open call is given up as a plain event.
	DefaultMaxHeld = 1 << 16
)

// Builder puts records in order of time on their threads, pairs entry and
// return records into slices (the rule of the package comment) and hands
// the events to a Writer. It is not safe for concurrent use.
type Builder struct {
	w       Writer
	returns map[funcKey]bool
	// Window and MaxHeld bound what is held (DefaultWindow,
	// DefaultMaxHeld); set them before the first Add.
	Window  time.Duration
	MaxHeld int

	threads map[Thread]*thread
	order   []*thread // in order of first record, for a stable end
	mark    time.Time // the latest record time seen
	swept   time.Time // mark at the last release of every thread
	late    uint64
	records uint64
	slices  uint64
}

type funcKey struct{ module, location string }

type thread struct {
	key   Thread
	queue []*Record // not released yet, in order of time
	last  time.Time // the time of the last record released
	any   bool      // a record was released
	held  []Event   // released, held behind open calls
	open  []int     // indexes in held of the open entries, innermost last
}

// NewBuilder returns a Builder writing to w.
func NewBuilder(w Writer) *Builder {
	return &Builder{w: w, returns: map[funcKey]bool{}, Window: DefaultWindow, MaxHeld: DefaultMaxHeld, threads: map[Thread]*thread{}}
}

// Returns declares a return probe of the module on the function at
// location (its location text, "write"): the module's offset-probe
// records of that location then open calls. Declare every one before the
// first Add.
func (b *Builder) Returns(module, location string) { b.returns[funcKey{module, location}] = true }

// HasReturns reports whether any return probe was declared.
func (b *Builder) HasReturns() bool { return len(b.returns) > 0 }

// Add takes one record; the Builder keeps it.
func (b *Builder) Add(r *Record) {
	b.records++
	key := r.Thread()
	t := b.threads[key]
	if t == nil {
		t = &thread{key: key}
		b.threads[key] = t
		b.order = append(b.order, t)
	}
	if t.any && r.Time.Before(t.last) {
		// later than the window: written after what is written already
		b.late++
		b.pair(t, r)
		return
	}
	i := len(t.queue)
	for i > 0 && t.queue[i-1].Time.After(r.Time) {
		i--
	}
	t.queue = slices.Insert(t.queue, i, r)
	if r.Time.After(b.mark) {
		b.mark = r.Time
	}
	limit := b.mark.Add(-b.Window)
	b.release(t, limit)
	if b.mark.Sub(b.swept) >= b.Window {
		b.swept = b.mark
		for _, o := range b.order {
			b.release(o, limit)
		}
	}
}

// release passes on the thread's queued records whose time is not after
// limit.
func (b *Builder) release(t *thread, limit time.Time) {
	n := 0
	for n < len(t.queue) && !t.queue[n].Time.After(limit) {
		n++
	}
	b.releaseN(t, n)
}

func (b *Builder) releaseN(t *thread, n int) {
	for _, r := range t.queue[:n] {
		t.last, t.any = r.Time, true
		b.pair(t, r)
	}
	clear(t.queue[:n])
	t.queue = t.queue[n:]
}

// pair places one record, in order of time, on its thread.
func (b *Builder) pair(t *thread, r *Record) {
	switch {
	case r.Kind != probe.RecordException && r.Probe == "" && b.returns[funcKey{r.Module, r.Location}]:
		t.held = append(t.held, Event{Instant, r})
		t.open = append(t.open, len(t.held)-1)
	case r.Kind != probe.RecordException && r.Probe == "retprobe":
		found := false
		for i := len(t.open) - 1; i >= 0; i-- {
			e := t.held[t.open[i]]
			if e.Module == r.Module && e.Location == r.Location {
				t.held[t.open[i]].Type = Begin
				t.held = append(t.held, Event{End, r})
				t.open = t.open[:i] // the calls above it never returned
				b.slices++
				found = true
				break
			}
		}
		if !found {
			t.held = append(t.held, Event{Instant, r})
		}
	case len(t.open) == 0:
		b.w.Event(Event{Instant, r})
		return
	default:
		t.held = append(t.held, Event{Instant, r})
	}
	if len(t.open) > 0 && len(t.held) > b.MaxHeld {
		t.open = t.open[1:] // the outermost call is given up
	}
	b.flushHeld(t)
}

// flushHeld writes the thread's held events up to its outermost open call.
func (b *Builder) flushHeld(t *thread) {
	n := len(t.held)
	if len(t.open) > 0 {
		n = t.open[0]
	}
	if n == 0 {
		return
	}
	for _, e := range t.held[:n] {
		b.w.Event(e)
	}
	clear(t.held[:n])
	t.held = t.held[n:]
	for i := range t.open {
		t.open[i] -= n
	}
}

// Tick releases, on every thread, the records older than Window before
// now: a reader that follows a live log calls it while no record comes, so
// that a quiet thread's records are not held until the end.
func (b *Builder) Tick(now time.Time) {
	limit := now.Add(-b.Window)
	for _, t := range b.order {
		b.release(t, limit)
	}
}

// Loss passes a count of lost records on to the writer.
func (b *Builder) Loss(l Loss) { b.w.Loss(l) }

// Flush writes everything still held, as the end of the records: open
// calls become plain events. The writer is not closed.
func (b *Builder) Flush() {
	for _, t := range b.order {
		b.releaseN(t, len(t.queue))
		t.open = t.open[:0]
		b.flushHeld(t)
	}
}

// Stats: the records added, the slices made, and the records that came
// later than the window on their thread.
func (b *Builder) Stats() (records, slices, late uint64) { return b.records, b.slices, b.late }
