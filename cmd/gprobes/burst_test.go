package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gprobes/gprobes/daemon"
	"github.com/gprobes/gprobes/internal/testkit"
)

// The record path at probe speed: a probe that logs two words on every
// call of a hot function, 4 threads × 250,000 calls at full speed
// (testdata/records/burst.c), on the jump route, with gprobes' default
// settings. Every record is kept, exactly: each thread's 250,000 calls,
// each call once, through run -o and through the daemon's log. Then an
// overload (below) still counts every record it could not keep, by
// reason.
const (
	burstCalls   = 250000
	burstThreads = 4
)

func buildBurst(t *testing.T) string {
	t.Helper()
	return testkit.CC(t, "burst", "-O2", "-pthread", "../../testdata/records/burst.c")
}

// burstProbe logs hot's two arguments: the call's index and its thread's.
func burstProbe(t *testing.T, bin string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "burst.dpdf")
	os.WriteFile(path, []byte("name = "+filepath.Base(bin)+"\nmodtype = user\noffset = hot\npush r,rdi\npush r,rsi\nlog 2\nexit 1\n"), 0o644)
	return path
}

// burstCheck counts the burst's records in JSON lines: every line a
// record of hot with two words, (call, thread); it fails unless each
// thread's calls are there exactly once each. It returns how many
// records it read.
func burstCheck(t *testing.T, what string, lines io.Reader, wantAll bool) int {
	t.Helper()
	seen := make([][]bool, burstThreads)
	for i := range seen {
		seen[i] = make([]bool, burstCalls)
	}
	var rec struct {
		Kind, Location, Data string
	}
	n, dup := 0, 0
	sc := bufio.NewScanner(lines)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		rec.Kind, rec.Location, rec.Data = "", "", ""
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("%s: line %d: %v: %q", what, n+1, err, sc.Text())
		}
		d, err := hex.DecodeString(rec.Data)
		if rec.Kind != "log" || rec.Location != "hot" || err != nil || len(d) != 16 {
			t.Fatalf("%s: line %d is not a record of hot with two words: %q", what, n+1, sc.Text())
		}
		call, thread := binary.LittleEndian.Uint64(d), binary.LittleEndian.Uint64(d[8:])
		if thread >= burstThreads || call >= burstCalls {
			t.Fatalf("%s: line %d: call %d of thread %d: no such call", what, n+1, call, thread)
		}
		if seen[thread][call] {
			dup++
		}
		seen[thread][call] = true
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if dup > 0 {
		t.Errorf("%s: %d records twice", what, dup)
	}
	if wantAll {
		for th := range seen {
			missing, first := 0, -1
			for c, ok := range seen[th] {
				if !ok {
					if first < 0 {
						first = c
					}
					missing++
				}
			}
			if missing > 0 {
				t.Errorf("%s: thread %d: %d of its %d calls have no record (the first: call %d)", what, th, missing, burstCalls, first)
			}
		}
	}
	return n
}

// summaryRow is the run summary's row of probe location loc: column
// name → value.
func summaryRow(t *testing.T, out, loc string) map[string]string {
	t.Helper()
	var cols []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && f[0] == "TARGET" {
			cols = f
			continue
		}
		if cols != nil && len(f) >= len(cols)-1 && f[3] == loc {
			row := map[string]string{}
			for i, c := range cols {
				if i < len(f) {
					row[c] = f[i]
				}
			}
			return row
		}
	}
	t.Fatalf("no summary row for %s in:\n%s", loc, out)
	return nil
}

// gprobesCmd is gprobes as a process of its own (this test binary).
func gprobesCmd(args ...string) *exec.Cmd {
	exe, _ := os.Executable()
	c := exec.Command(exe, args...)
	c.Env = append(os.Environ(), "GPROBES_TEST_MAIN=1")
	return c
}

func TestRecordBurstRun(t *testing.T) {
	bin := buildBurst(t)
	probe := burstProbe(t, bin)
	file := filepath.Join(t.TempDir(), "records.jsonl")
	c := gprobesCmd("run", "--json", "-o", file, probe, "--", bin, strconv.Itoa(burstCalls), strconv.Itoa(burstThreads))
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		t.Fatalf("run: %v\n%s%s", err, out.String(), errb.String())
	}
	row := summaryRow(t, out.String(), "hot")
	if row["HOW"] != "jump" || row["HITS"] != strconv.Itoa(burstCalls*burstThreads) || row["LOST"] != "0" {
		t.Errorf("summary: HOW %s HITS %s LOST %s, want jump, %d, 0\n%s%s", row["HOW"], row["HITS"], row["LOST"], burstCalls*burstThreads, out.String(), errb.String())
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n := burstCheck(t, "run -o", f, true); n != burstCalls*burstThreads {
		t.Errorf("run -o: %d records in the file, want %d", n, burstCalls*burstThreads)
	}
}

func TestRecordBurstDaemon(t *testing.T) {
	bin := buildBurst(t)
	probe := burstProbe(t, bin)
	dir := t.TempDir()
	sock, state := filepath.Join(dir, "d.sock"), filepath.Join(dir, "state")
	daemonProcess(t, sock, state)
	fx := exec.Command(bin, strconv.Itoa(burstCalls), strconv.Itoa(burstThreads), "-w")
	in, _ := fx.StdinPipe()
	stdout, _ := fx.StdoutPipe()
	if err := fx.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fx.Process.Kill(); fx.Wait() })
	sc := bufio.NewScanner(stdout)
	sc.Scan() // pid N
	out := mustRun(t, "insert", "--socket", sock, "--target", fmt.Sprintf("pid:%d", fx.Process.Pid), probe)
	if !strings.Contains(out, " jump ") {
		t.Fatalf("the probe is not on the jump route:\n%s", out)
	}
	in.Write([]byte("go\n"))
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "done ") {
		t.Fatalf("the fixture did not finish its calls: %q", sc.Text())
	}
	if err := fx.Wait(); err != nil {
		t.Fatalf("the fixture: %v (a probe changed what hot returns?)", err)
	}
	const all = burstCalls * burstThreads
	var st struct{ Written, LostInTargets uint64 }
	testkit.Wait(t, 2*time.Minute, "the daemon's log holds every record or the target's losses", func() (bool, string) {
		s := status(t, sock)
		st.Written, st.LostInTargets = s.Written, s.LostInTargets
		return s.Written+s.LostInTargets >= all, fmt.Sprintf("%d written, %d lost in the target", s.Written, s.LostInTargets)
	})
	if st.Written != all || st.LostInTargets != 0 {
		t.Errorf("the daemon wrote %d records and its target lost %d; want %d and 0", st.Written, st.LostInTargets, all)
	}
	// the log, its rotated files oldest first
	files, _ := filepath.Glob(filepath.Join(state, daemon.LogFileName+"*"))
	var rs []io.Reader
	for i := len(files) - 1; i >= 0; i-- {
		rs = append(rs, bytes.NewReader(logFileJSON(t, files[i])))
	}
	if n := burstCheck(t, "the daemon's log", io.MultiReader(rs...), true); n != all {
		t.Errorf("the daemon's log (%d files): %d records, want %d", len(files), n, all)
	}
}

// An overload: a ring of 64 KiB, and records written to a FIFO that
// nobody reads until the fixture has made its million calls. The
// writer is stuck, gprobes' queue (4 rings) and the ring fill, and the
// pads count every record they cannot commit, never waiting: the
// records in the FIFO plus the LOST column are the hits, exactly, and
// gprobes says why they were lost. The fixture's calls are all right.
func TestRecordBurstOverload(t *testing.T) {
	bin := buildBurst(t)
	probe := burstProbe(t, bin)
	fifo := filepath.Join(t.TempDir(), "records")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// the FIFO's reader opens it (run's open waits for one) and reads
	// nothing before the fixture is done
	opened := make(chan *os.File, 1)
	go func() {
		f, err := os.Open(fifo)
		if err != nil {
			t.Error(err)
		}
		opened <- f
	}()
	c := gprobesCmd("run", "--ring", "64KiB", "--json", "-o", fifo, probe, "--", bin, strconv.Itoa(burstCalls), strconv.Itoa(burstThreads))
	stdout, _ := c.StdoutPipe()
	var errb bytes.Buffer
	c.Stderr = &errb
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	r := bufio.NewReader(stdout)
	done := make(chan []string, 1)
	go func() {
		var got []string
		for {
			l, err := r.ReadString('\n')
			got = append(got, l)
			if strings.HasPrefix(l, "done ") || err != nil {
				done <- got
				return
			}
		}
	}()
	select {
	case got := <-done:
		if !strings.HasPrefix(got[len(got)-1], "done ") {
			t.Fatalf("the fixture did not finish its calls: %q\n%s", got, errb.String())
		}
	case <-time.After(2 * time.Minute):
		// the target waited for the stuck writer: what must never be
		c.Process.Kill()
		t.Fatalf("the fixture did not finish its calls in 2 minutes while nobody read the records")
	}
	f := <-opened
	if f == nil {
		return
	}
	defer f.Close()
	n := burstCheck(t, "run -o FIFO", f, false)
	rest, _ := io.ReadAll(r)
	if err := c.Wait(); err != nil {
		t.Fatalf("run: %v\n%s%s", err, rest, errb.String())
	}
	row := summaryRow(t, string(rest), "hot")
	lost, _ := strconv.Atoi(row["LOST"])
	if row["HOW"] != "jump" || row["HITS"] != strconv.Itoa(burstCalls*burstThreads) {
		t.Fatalf("summary: HOW %s HITS %s, want jump, %d\n%s", row["HOW"], row["HITS"], burstCalls*burstThreads, rest)
	}
	if lost == 0 || n+lost != burstCalls*burstThreads {
		t.Errorf("%d records in the FIFO and %d lost, want some lost and %d in all\n%s%s", n, lost, burstCalls*burstThreads, rest, errb.String())
	}
	if want := fmt.Sprintf("probe hot (minor 0): %d records lost in the process (its jump pads' ring was full)", lost); !strings.Contains(errb.String(), want) {
		t.Errorf("standard error does not say %q:\n%s", want, errb.String())
	}
}

// run writes records in order of time across the routes: the timeline
// fixture's outer on a jump pad, its return probe on the int3 route (a
// trap: logonfault = yes keeps a probe off the pads), mark on a jump
// pad; two threads of 300 calls each. A jump pad's
// record reaches gprobes through the ring, after the int3 route's of the
// same moment; run holds records a window (250 ms) to write them in
// order. Every record is there, each thread's calls in order, and the
// file's times never go back. (Before: written as they reached gprobes,
// 17-18 of the 1,800 went back in time.)
func TestRunRecordsInTimeOrder(t *testing.T) {
	prog := timelineFixture(t)
	probe := filepath.Join(t.TempDir(), "order.dpdf")
	os.WriteFile(probe, []byte(fmt.Sprintf("name = %s\nmodtype = user\noffset = outer\nminor = 1\npush r,rdi\nlog 1\nexit 1\nretprobe = outer\nminor = 2\nlogonfault = yes\npush r,rax\nlog 1\nexit 1\noffset = mark\nminor = 5\npush r,rdi\npush d,0x1122\nlog 2\nexit 1\n", prog)), 0o644)
	file := filepath.Join(t.TempDir(), "records.jsonl")
	c := gprobesCmd("run", "--json", "-o", file, probe, "--", prog, "calls", strconv.Itoa(timelineCalls))
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		t.Fatalf("run: %v\n%s%s", err, out.String(), errb.String())
	}
	sum := out.String()
	for loc, how := range map[string]string{"outer": "jump", "retprobe": "int3", "mark": "jump"} {
		if !regexp.MustCompile(`\s` + loc + `\s.*\s` + how + `\s`).MatchString(sum) {
			t.Fatalf("%s is not on the %s route:\n%s", loc, how, sum)
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var recs []daemon.LogLine
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r daemon.LogLine
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%v: %q", err, l)
		}
		recs = append(recs, r)
	}
	if want := 2 * timelineCalls * 3; len(recs) != want {
		t.Fatalf("%d records, want %d\n%s%s", len(recs), want, sum, errb.String())
	}
	back := 0
	for i := 1; i < len(recs); i++ {
		if recs[i].Time.Before(recs[i-1].Time) {
			if back++; back <= 3 {
				t.Errorf("record %d (%s minor %d, tid %d, %s) is older than the one before it (%s minor %d, tid %d, %s)", i, recs[i].Location, recs[i].Minor, recs[i].Tid, recs[i].Time.Format(time.RFC3339Nano),
					recs[i-1].Location, recs[i-1].Minor, recs[i-1].Tid, recs[i-1].Time.Format(time.RFC3339Nano))
			}
		}
	}
	if back > 0 {
		t.Errorf("%d of %d records went back in time", back, len(recs))
	}
	// each thread: outer(i)'s entry, its return, mark(i), for i in order
	next := map[int]int{}
	for _, r := range recs {
		want := []uint16{1, 2, 5}[next[r.Tid]%3]
		if r.Minor != want {
			t.Fatalf("thread %d: record %d is minor %d, want %d", r.Tid, next[r.Tid], r.Minor, want)
		}
		next[r.Tid]++
	}
	if strings.Contains(errb.String(), "late") {
		t.Errorf("records came late:\n%s", errb.String())
	}
}

// A daemon killed with SIGKILL in the middle of the burst: its log is
// read without it (gprobes log --file) to the last whole record, every
// record once, at least as many as the daemon said it had written. Then
// the end of the file is torn as a machine that died in the middle of a
// write leaves it: log --file reads the whole frames before the tear and
// says what it left, and a daemon started again on the same folder cuts
// the torn frame off, says so, and serves the same records.
func TestRecordBurstDaemonKilled(t *testing.T) {
	bin := buildBurst(t)
	probe := burstProbe(t, bin)
	dir := t.TempDir()
	sock, state := filepath.Join(dir, "d.sock"), filepath.Join(dir, "state")
	d, _ := daemonProcess(t, sock, state)
	fx := exec.Command(bin, strconv.Itoa(burstCalls), strconv.Itoa(burstThreads), "-w")
	in, _ := fx.StdinPipe()
	stdout, _ := fx.StdoutPipe()
	if err := fx.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fx.Process.Kill(); fx.Wait() })
	sc := bufio.NewScanner(stdout)
	sc.Scan() // pid N
	mustRun(t, "insert", "--socket", sock, "--target", fmt.Sprintf("pid:%d", fx.Process.Pid), probe)
	in.Write([]byte("go\n"))
	const all = burstCalls * burstThreads
	var written uint64
	testkit.Wait(t, 2*time.Minute, "the daemon has written part of the burst", func() (bool, string) {
		written = status(t, sock).Written
		return written >= 50000, fmt.Sprintf("%d written", written)
	})
	d.Process.Kill()
	d.Wait()
	t.Logf("killed the daemon after it said %d of %d records were written", written, all)
	// the log and its rotated files, oldest first, read without a daemon
	read := func(what string) (n int, tornSaid int) {
		t.Helper()
		files, _ := filepath.Glob(filepath.Join(state, daemon.LogFileName+"*"))
		var all bytes.Buffer
		for i := len(files) - 1; i >= 0; i-- {
			out, errs, code := gprobes(t, "log", "--file", files[i], "--json")
			if code != 0 {
				t.Fatalf("%s: log --file %s: exit %d: %s", what, files[i], code, errs)
			}
			if strings.Contains(errs, "torn tail") {
				tornSaid++
			}
			all.WriteString(out)
		}
		return burstCheck(t, what, &all, false), tornSaid
	}
	n, _ := read("the killed daemon's log")
	if uint64(n) < written {
		t.Errorf("the killed daemon's log: %d records, fewer than the %d it said it had written", n, written)
	}
	// a write torn by the machine's end: the last frame cut short
	path := filepath.Join(state, daemon.LogFileName)
	fi, err := os.Stat(path)
	if err != nil || fi.Size() < 64 {
		t.Fatalf("the log file: %v (%v): the burst's last records should be in it", fi, err)
	}
	if err := os.Truncate(path, fi.Size()-10); err != nil {
		t.Fatal(err)
	}
	n2, torn := read("the torn log")
	if torn != 1 || n2 >= n || n2 == 0 {
		t.Errorf("the torn log: %d records (%d before the tear), torn tail said for %d files; want fewer records, the tear said once", n2, n, torn)
	}
	// a daemon on the same folder: cuts the torn frame, says so, serves
	// the records before it
	sock2 := filepath.Join(dir, "d2.sock")
	_, dout := daemonProcess(t, sock2, state)
	if !strings.Contains(dout.String(), "torn tail") || !strings.Contains(dout.String(), "cut off") {
		t.Errorf("the daemon started again does not say it cut a torn tail:\n%s", dout)
	}
	out, errs, code := gprobes(t, "log", "--socket", sock2, "--json")
	var recs bytes.Buffer
	for _, l := range strings.SplitAfter(out, "\n") {
		if strings.Contains(l, `"kind":"log"`) {
			recs.WriteString(l)
		}
	}
	if got := burstCheck(t, "the daemon started again", &recs, false); code != 0 || got != n2 {
		t.Errorf("log from the daemon started again: exit %d, %d records, want the %d before the tear\n%s", code, got, n2, errs)
	}
}

// The burst into a daemon whose state folder is a 1 MiB tmpfs: the disk
// fills up part way. Every record is accounted for: written, or counted
// lost with its reason; the log (read without the daemon, log --file)
// holds exactly the records written, each whole and once; status says
// ENOSPC, query's LOST and the Prometheus counters say how many of the
// probe's records were lost and where.
func TestRecordBurstDaemonFullDisk(t *testing.T) {
	bin := buildBurst(t)
	probe := burstProbe(t, bin)
	state := filepath.Join(mountTmpfs(t, "1m"), "state")
	sock := filepath.Join(t.TempDir(), "d.sock")
	daemonProcess(t, sock, state, "--metrics", "127.0.0.1:0")
	fx := exec.Command(bin, strconv.Itoa(burstCalls), strconv.Itoa(burstThreads), "-w")
	in, _ := fx.StdinPipe()
	stdout, _ := fx.StdoutPipe()
	if err := fx.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fx.Process.Kill(); fx.Wait() })
	sc := bufio.NewScanner(stdout)
	sc.Scan() // pid N
	target := fmt.Sprintf("pid:%d", fx.Process.Pid)
	mustRun(t, "insert", "--socket", sock, "--target", target, probe)
	in.Write([]byte("go\n"))
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "done ") {
		t.Fatalf("the fixture did not finish its calls: %q", sc.Text())
	}
	if err := fx.Wait(); err != nil {
		t.Fatalf("the fixture: %v", err)
	}
	const all = burstCalls * burstThreads
	var st daemon.StatusResponse
	testkit.Wait(t, 2*time.Minute, "every record written or counted lost", func() (bool, string) {
		st = status(t, sock)
		return st.Written+st.Lost.Records+st.LostInTargets >= all, fmt.Sprintf("%d written, %d lost by the file, %d in the target", st.Written, st.Lost.Records, st.LostInTargets)
	})
	if st.Written+st.Lost.Records+st.LostInTargets != all || st.Written == 0 || st.Lost.Records == 0 {
		t.Errorf("%d written, %d lost by the file, %d in the target: want %d in all, some written, some lost", st.Written, st.Lost.Records, st.LostInTargets, all)
	}
	if !strings.Contains(st.Lost.FirstError, "no space left on device") {
		t.Errorf("status: the loss's first error %q, want ENOSPC", st.Lost.FirstError)
	}
	t.Logf("%d written, %d lost by the file (%s), %d lost in the target", st.Written, st.Lost.Records, st.Lost.FirstError, st.LostInTargets)
	// the file: every record written, each whole, once
	files, _ := filepath.Glob(filepath.Join(state, daemon.LogFileName+"*"))
	var recs bytes.Buffer
	for i := len(files) - 1; i >= 0; i-- {
		recs.Write(logFileJSON(t, files[i]))
	}
	if n := burstCheck(t, "the full disk's log", &recs, false); uint64(n) != st.Written {
		t.Errorf("the log files hold %d records, status says %d written", n, st.Written)
	}
	// query: the probe's LOST is all it lost, in the target and by the file
	var q struct{ Probes []struct{ Lost uint64 } }
	if out := mustRun(t, "query", "--socket", sock, "--json"); json.Unmarshal([]byte(out), &q) != nil || len(q.Probes) != 1 || q.Probes[0].Lost != st.Lost.Records+st.LostInTargets {
		t.Errorf("query --json: %s; want LOST %d", out, st.Lost.Records+st.LostInTargets)
	}
	// Prometheus: where each was lost
	fams := scrape(t, sock, "")
	p := map[string]string{"target": target, "minor": "0", "location": "hot"}
	with := func(k, v string) map[string]string {
		out := map[string]string{k: v}
		for a, b := range p {
			out[a] = b
		}
		return out
	}
	if got := value(t, fams, "gprobes_probe_lost_records_total", with("where", "log")); got != float64(st.Lost.Records) {
		t.Errorf("gprobes_probe_lost_records_total{where=log} = %v, want %d", got, st.Lost.Records)
	}
	if got := value(t, fams, "gprobes_probe_lost_records_total", with("where", "target")); got != float64(st.LostInTargets) {
		t.Errorf("gprobes_probe_lost_records_total{where=target} = %v, want %d", got, st.LostInTargets)
	}
	if got := value(t, fams, "gprobes_log_records_lost_total", map[string]string{"sink": "file"}); got != float64(st.Lost.Records) {
		t.Errorf("gprobes_log_records_lost_total{sink=file} = %v, want %d", got, st.Lost.Records)
	}
	if got := value(t, fams, "gprobes_log_records_written_total", map[string]string{"sink": "file"}); got != float64(st.Written) {
		t.Errorf("gprobes_log_records_written_total{sink=file} = %v, want %d", got, st.Written)
	}
}

// gprobes log --file: a binary log read without a daemon, as JSON lines
// exactly as the daemon serves them (each record's fields as written), the
// modules named kept; text; a torn tail said on standard error, the
// records before it printed, exit 0; refused with --follow.
func TestLogFile(t *testing.T) {
	dir := t.TempDir()
	w, err := daemon.OpenLog(dir, daemon.LogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var want, wantA []string
	var batch []daemon.LogLine
	for i := 0; i < 10; i++ {
		mod := []string{"/bin/a", "/bin/b"}[i%2]
		l := daemon.LogLine{Time: time.Unix(1700000000, int64(i)).Local(), Kind: "log", Target: "pid:7", Module: mod, Minor: uint16(i % 3),
			Location: "f<&>", Address: "0x401000", Pid: 7, Tid: 8 + i, Exit: 1, Data: "0102030405060708"}
		if i < 4 {
			w.Write(&l)
		} else {
			batch = append(batch, l)
		}
		want = append(want, string(l.AppendJSON(nil)))
		if mod == "/bin/a" {
			wantA = append(wantA, string(l.AppendJSON(nil)))
		}
	}
	w.WriteBatch(batch)
	w.Close()
	path := filepath.Join(dir, daemon.LogFileName)
	out, errs, code := gprobes(t, "log", "--file", path, "--json")
	if code != 0 || out != strings.Join(want, "\n")+"\n" || errs != "" {
		t.Errorf("log --file --json: exit %d, stderr %q:\n%s\nwant\n%s", code, errs, out, strings.Join(want, "\n"))
	}
	out, _, code = gprobes(t, "log", "--file", path, "--json", "/bin/a")
	if code != 0 || out != strings.Join(wantA, "\n")+"\n" {
		t.Errorf("log --file --json /bin/a: exit %d:\n%s", code, out)
	}
	out, _, code = gprobes(t, "log", "--file", path)
	if lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); code != 0 || len(lines) != 10 || !strings.Contains(lines[9], "/bin/b(0,0) f<&> 0x401000 pid 7 tid 17 exit 1 data 0102030405060708") {
		t.Errorf("log --file: exit %d:\n%s", code, out)
	}
	// the batch's frame torn: the four single records before it are read
	fi, _ := os.Stat(path)
	os.Truncate(path, fi.Size()-5)
	out, errs, code = gprobes(t, "log", "--file", path, "--json")
	if code != 0 || out != strings.Join(want[:4], "\n")+"\n" || !strings.Contains(errs, "torn tail") || !strings.Contains(errs, "the 4 records before it were read") {
		t.Errorf("torn: exit %d, stderr %q:\n%s", code, errs, out)
	}
	if _, errs, code := gprobes(t, "log", "--file", path, "--follow"); code != 2 || !strings.Contains(errs, "--file prints a log file") {
		t.Errorf("--file --follow: exit %d, %q", code, errs)
	}
}
