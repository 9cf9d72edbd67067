package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// smallDisk is a log file on a disk of capacity bytes: a write that does
// not fit writes what fits and fails with ENOSPC, as write(2) does.
// failTruncate makes that many Truncate calls fail with EIO first.
type smallDisk struct {
	*os.File
	capacity     int64
	failTruncate int
}

func (d *smallDisk) Write(b []byte) (int, error) {
	st, err := d.Stat()
	if err != nil {
		return 0, err
	}
	room := d.capacity - st.Size()
	if room >= int64(len(b)) {
		return d.File.Write(b)
	}
	n := 0
	if room > 0 {
		n, _ = d.File.Write(b[:room])
	}
	return n, &os.PathError{Op: "write", Path: d.Name(), Err: syscall.ENOSPC}
}

func (d *smallDisk) Truncate(size int64) error {
	if d.failTruncate > 0 {
		d.failTruncate--
		return &os.PathError{Op: "truncate", Path: d.Name(), Err: syscall.EIO}
	}
	return d.File.Truncate(size)
}

func record(i int, module string, minor uint16) *LogLine {
	return &LogLine{Time: time.Unix(int64(i), 0).UTC(), Kind: "log", Target: "pid:1", Module: module, Minor: minor,
		Location: "f", Address: "0x1", Pid: i, Data: strings.Repeat("ab", 20)}
}

// wholeRecords reads a log file: it must end with a whole frame; it
// returns the pids of its records.
func wholeRecords(t *testing.T, path string) []int {
	t.Helper()
	var out bytes.Buffer
	n, torn, err := ReadLogFile(path, &out)
	if err != nil {
		t.Fatal(err)
	}
	if torn != "" {
		t.Errorf("%s: %s", path, torn)
	}
	var pids []int
	for _, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		if line == "" {
			continue
		}
		var l LogLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("%s: a line that is not a record: %q: %v", path, line, err)
		}
		pids = append(pids, l.Pid)
	}
	if uint64(len(pids)) != n {
		t.Errorf("%s: %d records counted, %d lines", path, n, len(pids))
	}
	return pids
}

// A full disk: the records that do not fit are counted per probe with the
// error, no partial line stays in the file, even when cutting it off
// fails at first, and writing resumes when there is room again.
func TestLogWriterFullDisk(t *testing.T) {
	dir := t.TempDir()
	w, err := OpenLog(dir, LogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var warnings []string
	w.opts.Warn = func(s string) { warnings = append(warnings, s) }
	disk := &smallDisk{File: w.f.(*os.File), capacity: 3000, failTruncate: 1}
	w.f = disk
	written := map[int]bool{}
	for i := 0; i < 200; i++ {
		if w.Write(record(i, []string{"a", "b"}[i%2], uint16(i%3))) == nil {
			written[i] = true
		}
	}
	pids := wholeRecords(t, w.Path())
	if len(pids) != len(written) || len(pids) == 0 || len(pids) == 200 {
		t.Fatalf("%d records in the file, %d writes succeeded", len(pids), len(written))
	}
	for _, p := range pids {
		if !written[p] {
			t.Errorf("record %d is in the file but its write failed", p)
		}
	}
	st := w.Status()
	if st.Lost.Records != uint64(200-len(pids)) {
		t.Errorf("lost %d, want %d (200 - %d in the file)", st.Lost.Records, 200-len(pids), len(pids))
	}
	if !strings.Contains(st.Lost.FirstError, "no space left on device") {
		t.Errorf("first error %q", st.Lost.FirstError)
	}
	var sum uint64
	for _, m := range []string{"a", "b"} {
		for minor := uint16(0); minor < 3; minor++ {
			want := uint64(0)
			for i := 0; i < 200; i++ {
				if !written[i] && []string{"a", "b"}[i%2] == m && uint16(i%3) == minor {
					want++
				}
			}
			got, _ := w.Lost("pid:1", m, minor)
			if got != want {
				t.Errorf("lost of %s minor %d: %d, want %d", m, minor, got, want)
			}
			sum += got
		}
	}
	if sum != st.Lost.Records {
		t.Errorf("per probe %d, in all %d", sum, st.Lost.Records)
	}
	// room again: writing resumes, on a line of its own
	disk.capacity = 1 << 20
	for i := 200; i < 210; i++ {
		if err := w.Write(record(i, "a", 0)); err != nil {
			t.Fatalf("after room was made: %v", err)
		}
	}
	if got := wholeRecords(t, w.Path()); len(got) != len(pids)+10 || got[len(got)-1] != 209 {
		t.Errorf("after room was made: %d records, last %v", len(got), got[len(got)-1:])
	}
	if len(warnings) != 2 || !strings.Contains(warnings[0], "no space left") || !strings.Contains(warnings[1], fmt.Sprintf("%d records lost", st.Lost.Records)) {
		t.Errorf("warnings: %q", warnings)
	}
	// the log stream ends with the count
	var out bytes.Buffer
	if err := w.Follow(context.Background(), &out, false, nil); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	var last LostLine
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Kind != "lost" || last.Lost.Records != st.Lost.Records {
		t.Errorf("last line of the stream %q (%v), want the lost count %d", lines[len(lines)-1], err, st.Lost.Records)
	}
	if len(lines) != len(pids)+10+1 {
		t.Errorf("stream of %d lines, want %d records and the count", len(lines), len(pids)+10)
	}
}

// A torn frame left by a gprobes (or a machine) that died mid-write is
// cut off when the log is opened again, and the writer says so; the
// records before it are all kept. A reader of the file as it was stops at
// the last whole frame and says what it left.
func TestOpenLogCutsTornTail(t *testing.T) {
	for _, c := range []struct {
		name string
		tear func(frame []byte) []byte
	}{
		{"half a frame", func(f []byte) []byte { return f[:len(f)/2] }},
		{"a header cut short", func(f []byte) []byte { return f[:7] }},
		{"a whole frame, a byte flipped", func(f []byte) []byte {
			f = append([]byte(nil), f...)
			f[len(f)-3] ^= 0x40
			return f
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, LogFileName)
			var e frameEncoder
			file := fileHeader()
			for i := 1; i <= 2; i++ {
				e.reset()
				e.add(record(i, "m", 1))
				file = e.appendFrame(file)
			}
			e.reset()
			e.add(record(9, "m", 1))
			e.add(record(10, "m", 1))
			whole := len(file)
			file = append(file, c.tear(e.appendFrame(nil))...)
			os.WriteFile(path, file, 0o600)
			var out bytes.Buffer
			n, torn, err := ReadLogFile(path, &out)
			if err != nil || n != 2 || !strings.Contains(torn, fmt.Sprintf("%d bytes from offset %d", len(file)-whole, whole)) {
				t.Errorf("read as left: %d records, %q, %v; want 2 and the torn tail after offset %d", n, torn, err, whole)
			}
			var warnings []string
			w, err := OpenLog(dir, LogOptions{Warn: func(s string) { warnings = append(warnings, s) }})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			w.Write(record(3, "m", 1))
			if got := wholeRecords(t, path); fmt.Sprint(got) != "[1 2 3]" {
				t.Errorf("records %v, want [1 2 3]", got)
			}
			if len(warnings) != 1 || !strings.Contains(warnings[0], fmt.Sprintf("cut off %d bytes after its last whole record at offset %d; its 2 records are kept", len(file)-whole, whole)) {
				t.Errorf("warnings %q", warnings)
			}
		})
	}
}

// A file at the log's path that is not a binary log (an older gprobes'
// JSON lines under the new name, anything else) is refused, never written
// over; ReadLogFile reads an older gprobes' JSON-lines log.
func TestOpenLogRefusesOtherFiles(t *testing.T) {
	dir := t.TempDir()
	a := append(record(1, "m", 1).AppendJSON(nil), '\n')
	os.WriteFile(filepath.Join(dir, LogFileName), a, 0o600)
	if _, err := OpenLog(dir, LogOptions{}); err == nil || !strings.Contains(err.Error(), "is not a gprobes binary log") {
		t.Errorf("JSON lines at the log's path: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, LogFileName)); !bytes.Equal(b, a) {
		t.Errorf("the file was changed: %q", b)
	}
	old := filepath.Join(dir, OldLogFileName)
	b := append(record(2, "m", 1).AppendJSON(nil), '\n')
	os.WriteFile(old, append(append(a, b...), b[:10]...), 0o600)
	var out bytes.Buffer
	n, torn, err := ReadLogFile(old, &out)
	if err != nil || n != 2 || out.String() != string(a)+string(b) || !strings.Contains(torn, "10 bytes that are not a whole line") {
		t.Errorf("the JSON-lines log: %d records, %q, %v:\n%s", n, torn, err, out.String())
	}
	os.WriteFile(old, []byte("hello\n"), 0o600)
	if _, _, err := ReadLogFile(old, &out); err == nil || !strings.Contains(err.Error(), "is not a gprobes log") {
		t.Errorf("a text file: %v", err)
	}
}

// syncBuffer is a bytes.Buffer for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Rotation by size: files never past the size, only whole lines, Keep
// rotated files, a reader following across the rotations gets every
// record once, in order.
func TestLogRotation(t *testing.T) {
	dir := t.TempDir()
	const max = 1000
	w, err := OpenLog(dir, LogOptions{MaxSize: max, Keep: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var followed syncBuffer
	done := make(chan error, 1)
	go func() { done <- w.Follow(ctx, &followed, true, nil) }()
	const n = 120
	for i := 0; i < n; i += 3 {
		for j := i; j < i+3; j++ {
			if err := w.Write(record(j, "m", 1)); err != nil {
				t.Fatal(err)
			}
		}
		// the follower keeps up (it may lag one rotation, not Keep)
		for deadline := time.Now().Add(10 * time.Second); strings.Count(followed.String(), "\n") < i+3; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the follower has %d records of %d", strings.Count(followed.String(), "\n"), i+3)
			}
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, line := range strings.Split(strings.TrimSuffix(followed.String(), "\n"), "\n") {
		var l LogLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("followed %q: %v", line, err)
		}
		got = append(got, l.Pid)
	}
	for i := range got {
		if got[i] != i {
			t.Fatalf("followed records %v, want 0..%d in order", got, n-1)
		}
	}
	if len(got) != n {
		t.Fatalf("followed %d records, want %d", len(got), n)
	}
	// on disk: .2, .1 and the current file, each whole and within the size
	var kept []int
	for _, name := range []string{LogFileName + ".2", LogFileName + ".1", LogFileName} {
		path := filepath.Join(dir, name)
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > max {
			t.Errorf("%s: %d bytes, more than %d", name, st.Size(), max)
		}
		kept = append(kept, wholeRecords(t, path)...)
	}
	if _, err := os.Stat(filepath.Join(dir, LogFileName+".3")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s.3: %v, want none (keep 2)", LogFileName, err)
	}
	for i := range kept {
		if kept[i] != n-len(kept)+i {
			t.Fatalf("kept records %v, want the last ones in order", kept)
		}
	}
	// the log, read now, is what is kept
	var out bytes.Buffer
	w.Follow(context.Background(), &out, false, nil)
	if c := strings.Count(out.String(), "\n"); c != len(kept) {
		t.Errorf("log read: %d records, %d kept", c, len(kept))
	}
	if w.Status().Lost.Records != 0 {
		t.Errorf("lost %d", w.Status().Lost.Records)
	}
}
