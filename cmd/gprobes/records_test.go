package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/gprobes/gprobes/probe"
)

// recordBatch is n record lines of about 200 bytes, batch b's.
func recordBatch(b, n int) ([]byte, []int, []*probe.Record) {
	var buf []byte
	var ends []int
	var recs []*probe.Record
	for i := range n {
		buf = fmt.Appendf(buf, "{record %03d %04d %0180d}\n", b, i, i)
		ends = append(ends, len(buf))
		recs = append(recs, &probe.Record{Module: "m", Minor: 1})
	}
	return buf, ends, recs
}

// gprobes run's records on a pipe that the command it started writes to
// as well (its standard output): while batches of records of 400 KiB
// each go in, another writer writes short lines to the same pipe. Every
// line read is whole, one of the records or one of the other's lines: a
// batch written in one write (the pipe takes it in parts, as it is read)
// lets the other's lines in inside records.
func TestRecordsOnASharedPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	other, err := os.OpenFile(fmt.Sprintf("/dev/fd/%d", w.Fd()), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	o := newRecordOutput(w, "a pipe")
	if o.piece != pipeBuf {
		t.Fatalf("on a pipe, batches go in writes of at most %d bytes (pipeBuf), not %d", pipeBuf, o.piece)
	}
	const batches, perBatch = 40, 2000
	lines := make(chan []string, 1)
	go func() {
		var got []string
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			got = append(got, sc.Text())
		}
		lines <- got
	}()
	var wg sync.WaitGroup
	done := make(chan struct{})
	others := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ; ; others++ {
			select {
			case <-done:
				return
			default:
			}
			fmt.Fprintf(other, "other %d\n", others)
			time.Sleep(10 * time.Microsecond)
		}
	}()
	for b := range batches {
		o.writeBatch(recordBatch(b, perBatch))
	}
	close(done)
	wg.Wait()
	other.Close()
	w.Close()
	got := <-lines
	rec := regexp.MustCompile(`^\{record (\d+) (\d+) \d{180}\}$`)
	oth := regexp.MustCompile(`^other \d+$`)
	var nrec, noth, bad int
	for _, l := range got {
		switch {
		case rec.MatchString(l):
			nrec++
		case oth.MatchString(l):
			noth++
		default:
			if bad++; bad <= 3 {
				t.Errorf("a line mixed from two writers: %.120q", l)
			}
		}
	}
	if nrec != batches*perBatch || noth != others || bad != 0 || others == 0 {
		t.Errorf("%d records, %d other lines, %d mixed; want %d, %d, 0", nrec, noth, bad, batches*perBatch, others)
	}
	if o.written != batches*perBatch || o.lost.Total() != 0 {
		t.Errorf("written %d, lost %d; want %d, 0", o.written, o.lost.Total(), batches*perBatch)
	}
}

// failAfter takes limit bytes, then fails; it counts the writes.
type failAfter struct {
	limit, took int
	sizes       []int
}

func (f *failAfter) Write(b []byte) (int, error) {
	f.sizes = append(f.sizes, len(b))
	n := min(len(b), f.limit-f.took)
	f.took += n
	if n < len(b) {
		return n, errors.New("no space left on device")
	}
	return n, nil
}

// A batch written in pieces whose third write fails part-way: the records
// of the pieces before and the whole ones of the failed piece are
// written, the rest counted lost, one each; the part of the record cut
// is taken out (the next record starts on a new line).
func TestRecordsPiecesFailing(t *testing.T) {
	b, ends, recs := recordBatch(0, 100)
	line := ends[0] // every line is as long
	perPiece := pipeBuf / line
	f := &failAfter{limit: 2*perPiece*line + 3*line + line/2}
	o := &recordOutput{w: f, name: "a pipe", piece: pipeBuf}
	o.writeBatch(b, ends, recs)
	for i, n := range f.sizes {
		if n > pipeBuf || n%line != 0 {
			t.Errorf("write %d: %d bytes, not whole lines of %d within %d", i, n, line, pipeBuf)
		}
	}
	if len(f.sizes) != 3 {
		t.Errorf("%d writes, want 3 (the third failed)", len(f.sizes))
	}
	want := uint64(2*perPiece + 3)
	if o.written != want || o.lost.Total() != 100-want || !o.torn {
		t.Errorf("written %d, lost %d, torn %v; want %d, %d, true", o.written, o.lost.Total(), o.torn, want, 100-want)
	}
	// a regular file's batch: one write
	f = &failAfter{limit: 1 << 30}
	o = &recordOutput{w: f, name: "a file"}
	o.writeBatch(b, ends, recs)
	if len(f.sizes) != 1 || o.written != 100 {
		t.Errorf("without pieces: %d writes, %d written; want 1, 100", len(f.sizes), o.written)
	}
}
