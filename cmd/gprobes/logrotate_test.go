package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/daemon"
	"github.com/gprobes/gprobes/internal/testkit"
)

// The daemon's log file renamed (logrotate's create mode: renamed with a
// date, a new empty file in its place) or removed under a real daemon
// while a real process is probed: the daemon writes on in a new file at
// the path, and gprobes log prints the records written since and says how
// many it cannot read and why. It used to print nothing and say nothing,
// while status counted every record as written.
func TestDaemonLogReplaced(t *testing.T) {
	hits := buildHits(t)
	for _, c := range []struct {
		name string
		do   func(path string) error
		want string // what gprobes log says of the first wave
	}{
		{"renamed", func(p string) error {
			if err := os.Rename(p, p+"-20261206"); err != nil {
				return err
			}
			return os.WriteFile(p, nil, 0o600)
		}, "100 records are in a log file renamed under the daemon (logrotate?) to a name it does not read"},
		{"removed", os.Remove, "100 records were in a log file removed under the daemon"},
	} {
		t.Run(c.name, func(t *testing.T) {
			state := filepath.Join(t.TempDir(), "state")
			sock, dout := startDaemonIn(t, state)
			probe := pushProbe(t)
			// a wave: a process making 100 calls of f_push, each a record
			wave := func(n int) {
				t.Helper()
				pid, run := waitingHits(t, hits, 50)
				mustRun(t, "insert", "--socket", sock, "--target", fmt.Sprintf("pid:%d", pid), probe)
				run()
				waitWritten(t, sock, n)
			}
			wave(100)
			if out := mustRun(t, "log", "--socket", sock, "--json"); strings.Count(out, `"kind":"log"`) != 100 {
				t.Fatalf("before: log printed %d records, want 100", strings.Count(out, `"kind":"log"`))
			}
			if err := c.do(filepath.Join(state, daemon.LogFileName)); err != nil {
				t.Fatal(err)
			}
			// the daemon notices by itself, idle (its once-a-second
			// check), and says so
			testkit.Wait(t, time.Minute, "the daemon says the log was "+c.name, func() (bool, string) {
				return strings.Contains(dout.String(), c.name+" under the daemon"), dout.String()
			})
			wave(200)
			out, errs, code := gprobes(t, "log", "--socket", sock, "--json")
			if n := strings.Count(out, `"kind":"log"`); code != 0 || n != 100 {
				t.Errorf("after: log exit %d, %d records, want the 100 of the second wave\n%s", code, n, errs)
			}
			if !strings.Contains(errs, c.want) {
				t.Errorf("log's standard error %q does not say %q", errs, c.want)
			}
			if recs := logRecords(t, filepath.Join(state, daemon.LogFileName)); len(recs) != 1 {
				t.Errorf("the new log file holds the records of %d processes, want the second wave's", len(recs))
			}
			if st := status(t, sock); st.Replaced != 1 || st.Written != 200 {
				t.Errorf("status: replaced %d, written %d; want 1 and 200", st.Replaced, st.Written)
			}
		})
	}
}

func status(t *testing.T, sock string) daemon.StatusResponse {
	t.Helper()
	var st daemon.StatusResponse
	if err := json.Unmarshal([]byte(mustRun(t, "status", "--socket", sock, "--json")), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// waitWritten waits until the daemon has written n records to its log.
func waitWritten(t *testing.T, sock string, n int) {
	t.Helper()
	testkit.Wait(t, time.Minute, fmt.Sprintf("the daemon writes %d records", n), func() (bool, string) {
		st := status(t, sock)
		return st.Written >= uint64(n), fmt.Sprintf("%d written", st.Written)
	})
}
