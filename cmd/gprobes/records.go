package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"

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
	torn    bool   // a partial record is in a stream that cannot be cut: start the next on a new line
	written uint64
	lost    daemon.Losses
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
// output: one write a record from the int3 route, before the thread goes
// on; one write a batch from a jump pad's ring (probe.BatchSink), which
// is what lets the writer keep up with more of a hot probe's records.
type runSink struct {
	target        string
	quiet, asJSON bool
	out           *recordOutput
	mu            *sync.Mutex
	buf           []byte
	ends          []int
	layouts       *daemon.ProbeLogs // the run's probes' log layouts
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
	s.buf = s.buf[:0]
	s.line(r)
	s.out.write(s.buf, r.Module, r.Minor)
}

func (s *runSink) CommitBatch(recs []*probe.Record) {
	if s.quiet {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf, s.ends = s.buf[:0], s.ends[:0]
	for _, r := range recs {
		s.line(r)
		s.ends = append(s.ends, len(s.buf))
	}
	s.out.writeBatch(s.buf, s.ends, recs)
}

// writeBatch writes records, line i ending at ends[i] in b, with one
// write: those that did not go in whole are counted lost, and the part of
// one that did is taken back out.
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
	n, err := o.w.Write(b)
	if err == nil && n != len(b) {
		err = io.ErrShortWrite
	}
	start := 0
	for i, end := range ends {
		switch {
		case end <= n:
			o.written++
		default:
			if start < n {
				o.cut(n - start) // part of this one got in
			}
			o.lost.Add("", recs[i].Module, recs[i].Minor, err)
		}
		start = end
	}
}
