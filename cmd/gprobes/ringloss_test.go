package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A jump pad's ring that fills up drops records and counts them where the
// user looks (issue 11): query's LOST column for the probe, log's lost
// line, and records in the log + lost = the hits, exactly. The fixture
// calls f_push 400000 times as fast as it can, so the daemon's writer
// falls behind.
func TestJumpRingLossShown(t *testing.T) {
	hits := buildHits(t)
	state := t.TempDir()
	sock, _ := startDaemonIn(t, state)
	const n = 200000 // f_push twice an iteration
	pid, run := waitingHits(t, hits, n)
	out := mustRun(t, "insert", "--socket", sock, "--target", fmt.Sprintf("pid:%d", pid), pushProbe(t))
	if !strings.Contains(out, " jump ") {
		t.Fatalf("the probe is not on the jump route:\n%s", out)
	}
	run()
	var q map[uint16]uint64
	var lost uint64
	// the records come through the ring a moment after the hits
	for deadline := time.Now().Add(10 * time.Second); ; {
		q = queryHits(t, sock, "hits")
		out, _, _ = gprobes(t, "query", "--socket", sock, "hits")
		lost, _ = strconv.ParseUint(lostColumn(t, out), 10, 64)
		inLog := logRecords(t, state+"/log.jsonl")[pid]
		if uint64(inLog)+lost == 2*n || time.Now().After(deadline) {
			if uint64(inLog)+lost != 2*n || q[1] != 2*n {
				t.Fatalf("%d records in the log + %d lost, %d hits; want %d", inLog, lost, q[1], 2*n)
			}
			t.Logf("%d records in the log, %d lost in the process", inLog, lost)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, errs, code := gprobes(t, "log", "--socket", sock)
	if lost > 0 && (code != 0 || !strings.Contains(errs, fmt.Sprintf("%d records lost in the targets probed", lost))) {
		t.Errorf("log: exit %d, standard error %q: want the %d records lost in the process", code, errs, lost)
	}
	if lost == 0 {
		t.Log("no record was lost this time: the lost line is not checked")
	}
}
