package timeline

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/probe"
)

// recorder is a Writer that keeps what it is given as text.
type recorder struct {
	got    []string
	losses []Loss
}

func (w *recorder) Event(ev Event) {
	t := [...]string{Instant: "i", Begin: "B", End: "E"}[ev.Type]
	kind := ""
	switch {
	case ev.Probe == "retprobe":
		kind = "r:"
	case ev.Kind == "exception":
		kind = "x:"
	}
	w.got = append(w.got, fmt.Sprintf("%d:%s%s%s@%d", ev.Tid, t, kind, ev.Location, ev.Time.Nanosecond()))
}
func (w *recorder) Loss(l Loss)  { w.losses = append(w.losses, l) }
func (w *recorder) Close() error { return nil }

var t0 = time.Unix(1700000000, 0)

// rec makes a record: "f" an offset probe's, "r:f" a return probe's, "x:f"
// an exception of an offset probe, at nanosecond ns of t0.
func rec(tid int, what string, ns int) *Record {
	r := &Record{Target: "pid:1", Record: probe.Record{Time: t0.Add(time.Duration(ns)), Kind: "log", Module: "m", Pid: 1, Tid: tid}}
	switch {
	case strings.HasPrefix(what, "r:"):
		r.Probe, r.Location = "retprobe", what[2:]
	case strings.HasPrefix(what, "x:"):
		r.Kind, r.Location, r.Exception = "exception", what[2:], "divide-by-zero"
	default:
		r.Location = what
	}
	return r
}

func build(t *testing.T, recs []*Record, setup func(b *Builder)) (*recorder, *Builder) {
	t.Helper()
	w := &recorder{}
	b := NewBuilder(w)
	b.Returns("m", "f")
	b.Returns("m", "g")
	if setup != nil {
		setup(b)
	}
	for _, r := range recs {
		b.Add(r)
	}
	b.Flush()
	return w, b
}

func TestPairing(t *testing.T) {
	for _, c := range []struct {
		name string
		recs []*Record
		want string
	}{
		{"nested", []*Record{rec(1, "f", 1), rec(1, "g", 2), rec(1, "x", 3), rec(1, "r:g", 4), rec(1, "r:f", 5)},
			"1:Bf@1 1:Bg@2 1:ix@3 1:Er:g@4 1:Er:f@5"},
		{"recursion", []*Record{rec(1, "f", 1), rec(1, "f", 2), rec(1, "r:f", 3), rec(1, "r:f", 4)},
			"1:Bf@1 1:Bf@2 1:Er:f@3 1:Er:f@4"},
		// g's entry never returns (longjmp, a filtered return): given up
		{"unreturned", []*Record{rec(1, "f", 1), rec(1, "g", 2), rec(1, "r:f", 3)},
			"1:Bf@1 1:ig@2 1:Er:f@3"},
		{"return without entry", []*Record{rec(1, "r:f", 1), rec(1, "h", 2)},
			"1:ir:f@1 1:ih@2"},
		{"entry without return at the end", []*Record{rec(1, "f", 1), rec(1, "h", 2)},
			"1:if@1 1:ih@2"},
		{"other threads do not pair", []*Record{rec(1, "f", 1), rec(2, "r:f", 2)},
			"1:if@1 2:ir:f@2"},
		{"an exception is neither", []*Record{rec(1, "x:f", 1), rec(1, "f", 2), rec(1, "x:f", 3), rec(1, "r:f", 4)},
			"1:ix:f@1 1:Bf@2 1:ix:f@3 1:Er:f@4"},
		{"a function without a return probe", []*Record{rec(1, "h", 1), rec(1, "r:h", 2)},
			"1:ih@1 1:ir:h@2"},
		// commit order is not time order: each thread comes out in order
		{"order", []*Record{rec(1, "f", 5), rec(2, "h", 3), rec(1, "h", 2), rec(1, "r:f", 9), rec(1, "h", 7), rec(2, "h", 1)},
			"1:ih@2 1:Bf@5 1:ih@7 1:Er:f@9 2:ih@1 2:ih@3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, _ := build(t, c.recs, nil)
			if got := strings.Join(w.got, " "); got != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

// Records are written once they are older than the window; a record of a
// thread that comes after later ones of it were written is written after
// them, counted late.
func TestWindow(t *testing.T) {
	w := &recorder{}
	b := NewBuilder(w)
	b.Window = 10
	b.Add(rec(1, "a", 1))
	b.Add(rec(1, "b", 5))
	if len(w.got) != 0 {
		t.Fatalf("written within the window: %v", w.got)
	}
	b.Add(rec(2, "c", 20)) // releases thread 1's records up to 10
	if got := strings.Join(w.got, " "); got != "1:ia@1 1:ib@5" {
		t.Fatalf("after the window: %s", got)
	}
	b.Add(rec(1, "late", 3))
	b.Flush()
	if got := strings.Join(w.got, " "); got != "1:ia@1 1:ib@5 1:ilate@3 2:ic@20" {
		t.Errorf("late: %s", got)
	}
	if r, s, late := b.Stats(); r != 4 || s != 0 || late != 1 {
		t.Errorf("stats %d %d %d", r, s, late)
	}
}

// An open call holds at most MaxHeld records: past it the outermost call
// is given up.
func TestMaxHeld(t *testing.T) {
	recs := []*Record{rec(1, "f", 1), rec(1, "g", 2)}
	for i := 0; i < 4; i++ {
		recs = append(recs, rec(1, "h", 3+i))
	}
	recs = append(recs, rec(1, "r:g", 10), rec(1, "r:f", 11))
	w, b := build(t, recs, func(b *Builder) { b.MaxHeld = 5 })
	want := "1:if@1 1:Bg@2 1:ih@3 1:ih@4 1:ih@5 1:ih@6 1:Er:g@10 1:ir:f@11"
	if got := strings.Join(w.got, " "); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if _, s, _ := b.Stats(); s != 1 {
		t.Errorf("%d slices, want 1", s)
	}
}

// Tick releases the records older than the window before now on every
// thread, quiet ones included, and not the newer ones; an open call stays
// held until its return comes.
func TestTick(t *testing.T) {
	w := &recorder{}
	b := NewBuilder(w)
	b.Returns("m", "f")
	b.Window = 10
	b.Add(rec(1, "a", 1))
	b.Add(rec(2, "f", 2))
	b.Add(rec(1, "b", 8))
	b.Tick(t0.Add(5)) // nothing is older than 10 before it
	if len(w.got) != 0 {
		t.Fatalf("written within the window: %v", w.got)
	}
	b.Tick(t0.Add(15)) // 1:a, 2:f (held: an open call)
	if got := strings.Join(w.got, " "); got != "1:ia@1" {
		t.Fatalf("after tick at 15: %s", got)
	}
	b.Add(rec(2, "r:f", 16))
	b.Tick(t0.Add(100))
	if got := strings.Join(w.got, " "); got != "1:ia@1 1:ib@8 2:Bf@2 2:Er:f@16" {
		t.Errorf("after tick at 100: %s", got)
	}
}
