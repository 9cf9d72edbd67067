package main

import (
	"container/heap"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gprobes/gprobes/daemon"
	"github.com/gprobes/gprobes/probe"
)

// exitLost is the exit status of gprobes run when records could not be
// written (to -o FILE or to standard output): whatever the command's own
// status was, which the message names. 74 is EX_IOERR of sysexits.h.
const exitLost = 74

// recordOutput is where gprobes run writes records: it counts those that
// do not go in, and takes back the part of a record that did, so that the
// next record starts on a line of its own.
type recordOutput struct {
	w       io.Writer
	name    string // for messages: the file, or "standard output"
	piece   int    // > 0: a batch goes in writes of whole lines of at most this many bytes
	torn    bool   // a partial record is in a stream that cannot be cut: start the next on a new line
	written uint64
	lost    daemon.Losses
}

// pipeBuf is PIPE_BUF on Linux: a write to a pipe of at most this many
// bytes is never interleaved with another writer's.
const pipeBuf = 4096

// newRecordOutput writes records to w. A pipe or terminal may have other
// writers (the command gprobes run started shares its standard output):
// a batch goes there in writes of whole lines of at most pipeBuf bytes,
// so that another writer's lines fall between records, never inside one.
// A regular file takes a batch in one write.
func newRecordOutput(w io.Writer, name string) *recordOutput {
	o := &recordOutput{w: w, name: name}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && !st.Mode().IsRegular() {
			o.piece = pipeBuf
		}
	}
	return o
}

// write writes one record (one line, b) of probe (module, minor).
func (o *recordOutput) write(b []byte, module string, minor uint16) {
	if o.torn {
		if _, err := o.w.Write([]byte{'\n'}); err != nil {
			o.lost.Add("", module, minor, err)
			return
		}
		o.torn = false
	}
	n, err := o.w.Write(b)
	if err == nil && n != len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		if n > 0 {
			o.cut(n)
		}
		o.lost.Add("", module, minor, err)
		return
	}
	o.written++
}

// cut takes the last n bytes written back out: truncating a regular file,
// otherwise (a pipe, a terminal) by ending the line before the next record.
func (o *recordOutput) cut(n int) {
	if f, ok := o.w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() >= int64(n) {
			if f.Truncate(st.Size()-int64(n)) == nil {
				return
			}
		}
	}
	o.torn = true
}

// parseSize reads a size: bytes, or with a suffix k, M, G (KiB, MiB, GiB
// also; all powers of 1024).
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"k", 1 << 10}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("size %q: a number of bytes, or with k, M or G (KiB, MiB, GiB)", s)
	}
	return n * mult, nil
}

// runSink formats gprobes run's records (JSON lines or text) for its
// output, in order of time across the routes (docs/records.md, "Order"):
// a record is held until it is orderWindow old by the clock, and the
// records held are written oldest first, with one write, when a record
// comes and every orderWindow/4 (tick). A record that comes when newer
// ones were written already (a jump pad's record that waited longer
// than the window in the ring or in gprobes' queue) is written with the
// next ones, out of order, and counted (late).
type runSink struct {
	target        string
	quiet, asJSON bool
	out           *recordOutput
	mu            *sync.Mutex
	buf           []byte
	ends          []int
	layouts       *daemon.ProbeLogs // the run's probes' log layouts
	held          heldRecords
	seq           uint64
	last          time.Time // the newest record written
	late          uint64
	out1          []*probe.Record
	ticking       bool
	stop          chan struct{}
	done          chan struct{}
}

// orderWindow is how long run holds a record to put it in order of time
// with the others.
const orderWindow = 250 * time.Millisecond

// heldRecords is a heap of records, the oldest first (in order of coming
// among records of the same time).
type heldRecords []heldRecord

type heldRecord struct {
	r   *probe.Record
	seq uint64
}

func (h heldRecords) Len() int { return len(h) }
func (h heldRecords) Less(i, j int) bool {
	// wall clock times (a record of the int3 route carries a monotonic
	// reading too, which Before would use against another such record)
	if a, b := h[i].r.Time.UnixNano(), h[j].r.Time.UnixNano(); a != b {
		return a < b
	}
	return h[i].seq < h[j].seq
}
func (h heldRecords) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *heldRecords) Push(x any)   { *h = append(*h, x.(heldRecord)) }
func (h *heldRecords) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = heldRecord{}
	*h = old[:len(old)-1]
	return x
}

func (s *runSink) line(r *probe.Record) {
	l := daemon.FromRecord(s.target, r)
	if s.asJSON {
		s.buf = l.AppendJSON(s.buf)
	} else {
		s.buf = append(s.buf, l.TextWith(s.layouts.Of(&l))...)
	}
	s.buf = append(s.buf, '\n')
}

func (s *runSink) Commit(r *probe.Record) {
	if s.quiet {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold(r)
	s.release(time.Now().Add(-orderWindow))
}

func (s *runSink) CommitBatch(recs []*probe.Record) {
	if s.quiet {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range recs {
		s.hold(r)
	}
	s.release(time.Now().Add(-orderWindow))
}

// hold keeps r until it is written in order; called with s.mu held.
func (s *runSink) hold(r *probe.Record) {
	if !s.last.IsZero() && r.Time.Before(s.last) {
		s.late++
	}
	s.seq++
	// a copy: the engine may use its record again once Commit returns
	c := *r
	heap.Push(&s.held, heldRecord{r: &c, seq: s.seq})
	if !s.ticking {
		s.ticking = true
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		go s.tick()
	}
}

// release writes the records held that are older than before, with one
// write; called with s.mu held.
func (s *runSink) release(before time.Time) {
	s.out1 = s.out1[:0]
	for len(s.held) > 0 && !s.held[0].r.Time.After(before) {
		s.out1 = append(s.out1, heap.Pop(&s.held).(heldRecord).r)
	}
	if len(s.out1) == 0 {
		return
	}
	s.buf, s.ends = s.buf[:0], s.ends[:0]
	for _, r := range s.out1 {
		s.line(r)
		s.ends = append(s.ends, len(s.buf))
		if r.Time.After(s.last) {
			s.last = r.Time
		}
	}
	s.out.writeBatch(s.buf, s.ends, s.out1)
	clear(s.out1)
}

// tick writes the records that have waited the window while no record
// comes, until flush.
func (s *runSink) tick() {
	defer close(s.done)
	t := time.NewTicker(orderWindow / 4)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.mu.Lock()
			s.release(time.Now().Add(-orderWindow))
			s.mu.Unlock()
		}
	}
}

// flush writes every record held (the engine is closed: no more come)
// and returns how many were written out of order. It takes s.mu.
func (s *runSink) flush() uint64 {
	s.mu.Lock()
	ticking := s.ticking
	s.ticking = false
	s.mu.Unlock()
	if ticking {
		close(s.stop)
		<-s.done
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// every record: the newest time there can be
	s.release(time.Unix(1<<62, 0))
	return s.late
}

// writeBatch writes records, line i ending at ends[i] in b: with one
// write, or in pieces of whole lines (piece). Those that did not go in
// whole are counted lost, and the part of one that did is taken back out.
func (o *recordOutput) writeBatch(b []byte, ends []int, recs []*probe.Record) {
	if o.torn {
		if _, err := o.w.Write([]byte{'\n'}); err != nil {
			for _, r := range recs {
				o.lost.Add("", r.Module, r.Minor, err)
			}
			return
		}
		o.torn = false
	}
	start := 0 // where line i starts
	for i := 0; i < len(ends); {
		j := len(ends) // lines i..j-1 go in this write
		if o.piece > 0 {
			for j = i + 1; j < len(ends) && ends[j]-start <= o.piece; j++ {
			}
		}
		n, err := o.w.Write(b[start:ends[j-1]])
		if err == nil && n != ends[j-1]-start {
			err = io.ErrShortWrite
		}
		if err == nil {
			o.written += uint64(j - i)
			start, i = ends[j-1], j
			continue
		}
		for line := start; i < len(ends); i++ {
			switch {
			case ends[i] <= start+n:
				o.written++
			default:
				if line < start+n {
					o.cut(start + n - line) // part of this one got in
				}
				o.lost.Add("", recs[i].Module, recs[i].Minor, err)
			}
			line = ends[i]
		}
		return
	}
}
