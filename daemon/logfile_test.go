package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/internal/testkit"
)

// readLog reads the whole log as a new reader does: the pids of the
// records, and the last LostLine (zero when there is none).
func readLog(t *testing.T, w *LogWriter) ([]int, LostLine) {
	t.Helper()
	var out bytes.Buffer
	if err := w.Follow(context.Background(), &out, false, nil); err != nil {
		t.Fatal(err)
	}
	return parseStream(t, out.String())
}

func parseStream(t *testing.T, s string) (pids []int, lost LostLine) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		if line == "" {
			continue
		}
		var l LogLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if l.Kind == "lost" {
			json.Unmarshal([]byte(line), &lost)
			continue
		}
		pids = append(pids, l.Pid)
	}
	return pids, lost
}

func seq(from, to int) string {
	var s []string
	for i := from; i < to; i++ {
		s = append(s, fmt.Sprint(i))
	}
	return "[" + strings.Join(s, " ") + "]"
}

// The log file renamed, removed or cut under the daemon (logrotate's
// create and copytruncate modes, a person's rm): the writer starts a new
// file at the path, and a reader reads every record it can find, says how
// many it cannot and why, and never prints nothing in silence. A reader
// that was following when it happened misses nothing.
func TestLogReplacedUnderTheWriter(t *testing.T) {
	for _, c := range []struct {
		name string
		do   func(path string) error
		// what a reader starting afterwards reads, and what it is told
		read         string
		lost         func(LostLine) uint64
		warning      string
		renamedAsOne bool // the renamed file is log.bin.1: read as the daemon's
	}{
		{name: "logrotate create (renamed with a date, a new empty file)", do: func(p string) error {
			if err := os.Rename(p, p+"-20261206"); err != nil {
				return err
			}
			return os.WriteFile(p, nil, 0o600)
		}, read: seq(10, 15), lost: func(l LostLine) uint64 { return l.RenamedAway }, warning: "renamed under the daemon"},
		{name: "logrotate create, renamed to log.bin.1", do: func(p string) error {
			if err := os.Rename(p, p+".1"); err != nil {
				return err
			}
			return os.WriteFile(p, nil, 0o600)
		}, read: seq(0, 15), lost: func(l LostLine) uint64 { return l.RenamedAway }, warning: "renamed under the daemon", renamedAsOne: true},
		{name: "renamed, no new file", do: func(p string) error { return os.Rename(p, p+".old") },
			read: seq(10, 15), lost: func(l LostLine) uint64 { return l.RenamedAway }, warning: "renamed under the daemon"},
		{name: "removed", do: os.Remove,
			read: seq(10, 15), lost: func(l LostLine) uint64 { return l.RemovedAway }, warning: "removed under the daemon"},
		{name: "copytruncate", do: func(p string) error {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if err := os.WriteFile(p+".1", b, 0o600); err != nil {
				return err
			}
			return os.Truncate(p, 0)
		}, read: seq(10, 15), lost: func(l LostLine) uint64 { return l.CutAway }, warning: "was cut to"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			var warnings []string
			w, err := OpenLog(dir, LogOptions{MaxSize: 0, Keep: 2, Warn: func(s string) { warnings = append(warnings, s) }})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var followed syncBuffer
			done := make(chan error, 1)
			go func() { done <- w.Follow(ctx, &followed, true, nil) }()
			for i := 0; i < 10; i++ {
				w.Write(record(i, "m", 1))
			}
			waitLines(t, &followed, 10)
			if err := c.do(w.Path()); err != nil {
				t.Fatal(err)
			}
			// a write at once may still go to the old file (inotify's
			// event not yet read, or a cut, which inotify does not
			// report, less than checkInterval ago): a follower has it,
			// a new reader is told where it is
			w.Write(record(10, "m", 1))
			testkit.WaitTrue(t, time.Minute, "the writer notices", func() bool { return w.Status().Replaced > 0 })
			for i := 11; i < 15; i++ {
				w.Write(record(i, "m", 1))
			}
			pids, lost := readLog(t, w)
			if fmt.Sprint(pids) != c.read && !(fmt.Sprint(pids) == seq(11, 15) && c.read == seq(10, 15)) {
				t.Errorf("a new reader read %v, want %s", pids, c.read)
			}
			missing := 15 - uint64(len(pids))
			if got := c.lost(lost); got != missing {
				t.Errorf("a new reader was told %d records are away (%+v), want %d: the ones it did not read", got, lost, missing)
			}
			if c.renamedAsOne && (lost.RenamedAway != 0 || lost.Kind != "") {
				t.Errorf("the renamed file was read, yet the reader was told %+v", lost)
			}
			if st := w.Status(); st.Replaced != 1 || st.Written != 15 {
				t.Errorf("status: replaced %d, written %d; want 1 and 15", st.Replaced, st.Written)
			}
			if len(warnings) != 1 || !strings.Contains(warnings[0], c.warning) {
				t.Errorf("warnings %q, want one saying %q", warnings, c.warning)
			}
			// the follower, there all along, has every record once
			waitLines(t, &followed, 15)
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			got, flost := parseStream(t, followed.String())
			if fmt.Sprint(got) != seq(0, 15) {
				t.Errorf("the follower read %v, want %s", got, seq(0, 15))
			}
			if c.name != "copytruncate" && flost != (LostLine{}) {
				t.Errorf("the follower was told %+v, having read everything", flost)
			}
			// and the file at the path is the daemon's again
			if recs := wholeRecords(t, w.Path()); len(recs) == 0 || recs[len(recs)-1] != 14 {
				t.Errorf("the file at the path holds %v", recs)
			}
		})
	}
}

// waitLines waits until b holds n record lines.
func waitLines(t *testing.T, b *syncBuffer, n int) {
	t.Helper()
	testkit.Wait(t, time.Minute, fmt.Sprintf("the follower has %d records", n), func() (bool, string) {
		pids, _ := parseStream(t, b.String())
		return len(pids) >= n, fmt.Sprint(pids)
	})
}

// A FIFO or a directory at the log's path is refused with the reason: the
// log is a file the daemon reads back, truncates and rotates.
func TestOpenLogRefusesNonRegularFiles(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, LogFileName), 0o700)
	if _, err := OpenLog(dir, LogOptions{}); err == nil {
		t.Error("a directory at the log's path was accepted")
	}
	dir = t.TempDir()
	if err := mkfifo(filepath.Join(dir, LogFileName)); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenLog(dir, LogOptions{}); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a FIFO at the log's path: %v", err)
	}
}

// The writer notices a rename at once, through inotify: the first write
// after the rename goes to the new file, not up to checkInterval later.
func TestLogWatchNoticesARenameAtOnce(t *testing.T) {
	dir := t.TempDir()
	w, err := OpenLog(dir, LogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.unwatch == nil {
		t.Fatal("no inotify watch on the log's directory")
	}
	w.Write(record(1, "m", 1))
	if err := os.Rename(w.Path(), w.Path()+"-old"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitTrue(t, time.Minute, "inotify reports the rename", w.moved.Load)
	w.Write(record(2, "m", 1))
	if got := wholeRecords(t, w.Path()); fmt.Sprint(got) != "[2]" {
		t.Errorf("the new file holds %v, want [2]", got)
	}
	if got := wholeRecords(t, w.Path()+"-old"); fmt.Sprint(got) != "[1]" {
		t.Errorf("the renamed file holds %v, want [1]", got)
	}
}

// When no new file can be opened at the path (a directory put there), the
// writer goes on in the file it has, and a reader reads it through the
// writer's descriptor: the records are neither lost nor hidden.
func TestLogMovedAndNoNewFile(t *testing.T) {
	dir := t.TempDir()
	var warnings []string
	w, err := OpenLog(dir, LogOptions{Warn: func(s string) { warnings = append(warnings, s) }})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Write(record(0, "m", 1))
	os.Rename(w.Path(), w.Path()+"-old")
	os.Mkdir(w.Path(), 0o700)
	w.Status() // the writer looks
	for i := 1; i < 4; i++ {
		if err := w.Write(record(i, "m", 1)); err != nil {
			t.Fatal(err)
		}
	}
	if pids, lost := readLog(t, w); fmt.Sprint(pids) != "[0 1 2 3]" || lost != (LostLine{}) {
		t.Errorf("read %v (%+v), want every record", pids, lost)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "no new one can be opened") {
		t.Errorf("warnings %q", warnings)
	}
}
