package main

import (
	"bufio"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/daemon"
	"github.com/gprobes/gprobes/pad"
)

// ringHolds is how many records of logWords logged words a fresh ring of
// size bytes takes before it is full when nothing drains it: a record is
// its 48-byte header and its log rounded to 8, and one that would pass the
// ring's end needs a padding record to the end as well, which a full ring
// refuses too.
func ringHolds(size, logWords int) int { return size / (48 + 8*logWords) }

// A jump pad's ring that fills up drops records and counts them where the
// user looks: query's LOST column for the probe, log's lost line, and
// records in the log + lost = the hits, exactly, while the process lives
// (the pads' counters) and after it is gone (its counts kept). The daemon
// is frozen (SIGSTOP) while the fixture calls f_push 400,000 times, so
// its drain takes nothing: the smallest ring (64 KiB) holds 1,170 records
// of one logged word and the pads count the other 398,830 lost, every
// run. The fixture then sleeps (-l -p: a second round only after 10
// minutes) until the test kills it.
func TestJumpRingLossShown(t *testing.T) {
	hits := buildHits(t)
	state := t.TempDir()
	sock := t.TempDir() + "/d.sock"
	d, _ := daemonProcess(t, sock, state, "--ring", "64KiB")
	const n = 200000 // f_push twice an iteration
	kept := uint64(ringHolds(pad.MinRingSize, 1))
	if kept != 1170 {
		t.Fatalf("the ring holds %d records, want 1170 (the record layout changed: fix ringHolds)", kept)
	}
	f := startWaitingHits(t, hits, n, "-l", "-p", "600000")
	out := mustRun(t, "insert", "--socket", sock, "--target", fmt.Sprintf("pid:%d", f.pid), pushProbe(t))
	if !strings.Contains(out, " jump ") {
		t.Fatalf("the probe is not on the jump route:\n%s", out)
	}
	thaw := freeze(t, d.Process.Pid)
	f.goAndWaitLoop(t)
	thaw()
	// the daemon drains the ring and commits what it held once it runs
	counts := func(when string) {
		t.Helper()
		var q map[uint16]uint64
		var lost uint64
		var inLog int
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
			q = queryHits(t, sock, "hits")
			out, _, _ = gprobes(t, "query", "--socket", sock, "hits")
			lost, _ = strconv.ParseUint(lostColumn(t, out), 10, 64)
			inLog = logRecords(t, filepath.Join(state, daemon.LogFileName))[f.pid]
			if uint64(inLog) == kept && lost == 2*n-kept && q[1] == 2*n {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d records in the log, %d lost, %d hits; want %d, %d, %d\n%s", when, inLog, lost, q[1], kept, 2*n-kept, 2*n, out)
			}
		}
		_, errs, code := gprobes(t, "log", "--socket", sock)
		if want := fmt.Sprintf("%d records lost in the targets probed", lost); code != 0 || !strings.Contains(errs, want) {
			t.Errorf("%s: log: exit %d, standard error %q: want %q", when, code, errs, want)
		}
	}
	counts("the process running")
	f.cmd.Process.Kill()
	f.cmd.Wait()
	counts("the process gone")
}

// waitingFixture is the hits fixture waiting for a line on its standard input
// before its n iterations (-w), its output read.
type waitingFixture struct {
	pid   int
	cmd   *exec.Cmd
	in    interface{ Write([]byte) (int, error) }
	lines chan string
}

func startWaitingHits(t *testing.T, hits string, n int, more ...string) *waitingFixture {
	t.Helper()
	cmd := exec.Command(hits, append([]string{"-w", "-n", strconv.Itoa(n)}, more...)...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	f := &waitingFixture{pid: cmd.Process.Pid, cmd: cmd, in: in, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f.lines <- sc.Text()
		}
		close(f.lines)
	}()
	return f
}

// goAndWaitLoop releases the fixture and returns once it has printed its
// checksum: its iterations are over (its exit, which a tracer sees, is
// still to come).
func (f *waitingFixture) goAndWaitLoop(t *testing.T) {
	t.Helper()
	f.in.Write([]byte("go\n"))
	var seen []string
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case l, ok := <-f.lines:
			if !ok {
				t.Fatalf("the fixture ended its output without a checksum: %q", seen)
			}
			seen = append(seen, l)
			if strings.Contains(l, " checksum ") {
				return
			}
		case <-timeout:
			t.Fatalf("the fixture did not finish its iterations in 2 minutes; it printed %q", seen)
		}
	}
}
