package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gprobes/gprobes/daemon"
	"github.com/gprobes/gprobes/internal/testkit"
)

// mountTmpfs mounts a tmpfs of size (mount's size=) for the test: a disk
// that fills up. Without root or mount it skips, but under CI=true it
// fails.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput()
	if err != nil {
		msg := fmt.Sprintf("cannot mount a %s tmpfs (root and mount needed): %v %s", size, err, out)
		testkit.SkipOrFail(t, "%s", msg)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

// fill writes a file of n bytes in dir (n < 0: until the disk is full).
func fill(t *testing.T, dir string, n int) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte("x"), 1024)
	for written := 0; n < 0 || written < n; written += len(chunk) {
		if n >= 0 && n-written < len(chunk) {
			chunk = chunk[:n-written]
		}
		if _, err := f.Write(chunk); err != nil {
			if n < 0 && errors.Is(err, syscall.ENOSPC) {
				break
			}
			t.Fatal(err)
		}
	}
	return path
}

// lockedBuffer collects a process's output while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startDaemonIn runs "gprobes daemon" with its state in state and more
// flags; its output is collected.
func startDaemonIn(t *testing.T, state string, flags ...string) (string, *lockedBuffer) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "d.sock")
	_, out := daemonProcess(t, sock, state, flags...)
	return sock, out
}

// waitingHits starts the fixture making n calls of each function once it
// reads a line; go releases it and waits for its end.
func waitingHits(t *testing.T, hits string, n int) (pid int, run func()) {
	t.Helper()
	cmd := exec.Command(hits, "-w", "-n", strconv.Itoa(n))
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd.Process.Pid, func() {
		t.Helper()
		in.Write([]byte("go\n"))
		waited := make(chan error, 1)
		go func() { waited <- cmd.Wait() }()
		select {
		case err := <-waited:
			if err != nil {
				t.Fatalf("the fixture: %v", err)
			}
		case <-time.After(120 * time.Second):
			t.Fatal("the fixture did not end in 120 s")
		}
	}
}

// A probe that commits one record per call of f_push and counts them in
// lv 0. The fixture calls f_push twice in each of its -n iterations (once
// itself, once through f_call).
func pushProbe(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "push.dpdf")
	os.WriteFile(path, []byte("name = hits\nmodtype = user\nvars = 1\noffset = f_push\nminor = 1\ninc lv,0\npush r,rdi\nlog 1\nexit 1\n"), 0o644)
	return path
}

// logRecords reads a log file: every line must be a whole record. It
// returns how many records each pid has.
// logFileJSON is the records of a daemon's log file (binary) as JSON
// lines; the file must end with a whole record.
func logFileJSON(t *testing.T, path string) []byte {
	t.Helper()
	return readLogFile(t, path, false)
}

// readLogFile is logFileJSON; live, the file may be being written: a
// frame the reader finds cut short is one still being written.
func readLogFile(t *testing.T, path string, live bool) []byte {
	t.Helper()
	var out bytes.Buffer
	if _, torn, err := daemon.ReadLogFile(path, &out); err != nil || torn != "" && !live {
		t.Fatalf("%s: %v %s", path, err, torn)
	}
	return out.Bytes()
}

func logRecords(t *testing.T, path string) map[int]int {
	t.Helper()
	return recordsByPid(t, path, logFileJSON(t, path))
}

// recordsByPid counts the records of JSON lines b by pid.
func recordsByPid(t *testing.T, path string, b []byte) map[int]int {
	t.Helper()
	per := map[int]int{}
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if line == "" {
			continue
		}
		var l daemon.LogLine
		if err := json.Unmarshal([]byte(line), &l); err != nil || l.Kind != "log" {
			t.Fatalf("%s: a line that is not a whole record: %q (%v)", path, line, err)
		}
		per[l.Pid]++
	}
	return per
}

// lv0 is lv 0 of module hits in target pid:N.
func lv0(t *testing.T, sock string, pid int) int {
	t.Helper()
	var v struct {
		Modules []struct {
			Target, Module string
			LV             []string
		}
	}
	json.Unmarshal([]byte(mustRun(t, "getvars", "--socket", sock, "hits", "--json")), &v)
	for _, m := range v.Modules {
		if m.Target == fmt.Sprintf("pid:%d", pid) && len(m.LV) > 0 {
			n, _ := strconv.Atoi(m.LV[0])
			return n
		}
	}
	t.Fatalf("no lv of hits in pid:%d", pid)
	return 0
}

// The daemon on a full disk (docs/api.md, "Lost records"): a 64 KiB tmpfs
// holds its state.
// 20,000 records are committed; those the file cannot take are counted,
// exactly, and shown by query, log and /v1/status with the error; the file
// has only whole lines; the daemon answers other clients all along; once
// room is made, writing resumes.
func TestDaemonFullDisk(t *testing.T) {
	hits := buildHits(t)
	state := mountTmpfs(t, "64k")
	filler := fill(t, state, 40<<10)
	// the int3 route: each record is written before its thread goes on,
	// so every one the disk refused is counted there (on the jump route
	// some would be counted lost in the process's ring instead)
	sock, dout := startDaemonIn(t, state, "--route", "int3")
	probe := pushProbe(t)
	const n = 20000
	pidA, runA := waitingHits(t, hits, n/2)
	mustRun(t, "insert", "--socket", sock, "--target", fmt.Sprintf("pid:%d", pidA), probe)
	// other clients, all along
	stop := make(chan struct{})
	var answered, failed int
	var firstFail string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c := daemon.NewClient(sock)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, err1 := c.Status()
			_, err2 := c.Probes("")
			if err1 != nil || err2 != nil {
				failed++
				if firstFail == "" {
					firstFail = fmt.Sprint(err1, err2)
				}
			} else {
				answered++
			}
		}
	}()
	runA()
	close(stop)
	wg.Wait()
	if failed > 0 || answered == 0 {
		t.Errorf("other clients during the run: %d answered, %d failed (%s)", answered, failed, firstFail)
	}
	if got := lv0(t, sock, pidA); got != n {
		t.Fatalf("lv 0 = %d, want %d: the fixture made %d calls of f_push", got, n, n)
	}
	logPath := filepath.Join(state, daemon.LogFileName)
	inFile := logRecords(t, logPath)[pidA]
	wantLost := n - inFile
	if inFile == 0 || wantLost == 0 {
		t.Fatalf("%d records in the file of %d: the disk was meant to fill up part way", inFile, n)
	}
	// /v1/status
	st, err := daemon.NewClient(sock).Status()
	if err != nil {
		t.Fatal(err)
	}
	if st.Lost.Records != uint64(wantLost) || !strings.Contains(st.Lost.FirstError, "no space left on device") {
		t.Errorf("status: lost %+v, want %d records (%d committed, %d in the file) and ENOSPC", st.Lost, wantLost, n, inFile)
	}
	// query: per probe, in JSON and in the table, and the total on stderr
	var q struct {
		Probes []struct {
			Target string
			Minor  int
			Lost   uint64
		}
		Lost daemon.LossSummary
	}
	out := mustRun(t, "query", "--socket", sock, "hits", "--json")
	if err := json.Unmarshal([]byte(out), &q); err != nil || len(q.Probes) != 1 || q.Probes[0].Lost != uint64(wantLost) || q.Lost.Records != uint64(wantLost) {
		t.Errorf("query --json: %v %s, want lost %d", err, out, wantLost)
	}
	out, errs, code := gprobes(t, "query", "--socket", sock, "hits")
	if code != 0 || lostColumn(t, out) != strconv.Itoa(wantLost) {
		t.Errorf("query: exit %d, want a LOST column of %d:\n%s", code, wantLost, out)
	}
	if !strings.Contains(errs, fmt.Sprintf("%d records lost", wantLost)) || !strings.Contains(errs, "no space left on device") {
		t.Errorf("query's standard error does not say what was lost: %q", errs)
	}
	// log: the records in the file, then the count
	out, errs, code = gprobes(t, "log", "--socket", sock, "--json")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	var last daemon.LostLine
	json.Unmarshal([]byte(lines[len(lines)-1]), &last)
	if code != 0 || len(lines) != inFile+1 || last.Kind != "lost" || last.Lost.Records != uint64(wantLost) {
		t.Errorf("log --json: exit %d, %d lines, last %q; want %d records and a lost line of %d", code, len(lines), lines[len(lines)-1], inFile, wantLost)
	}
	if !strings.Contains(errs, fmt.Sprintf("%d records lost", wantLost)) || !strings.Contains(errs, "no space left on device") {
		t.Errorf("log's standard error does not say what was lost: %q", errs)
	}
	out, errs, _ = gprobes(t, "log", "--socket", sock)
	if strings.Count(out, "\n") != inFile || !strings.Contains(errs, fmt.Sprintf("%d records lost", wantLost)) {
		t.Errorf("log: %d lines (want %d), stderr %q", strings.Count(out, "\n"), inFile, errs)
	}
	if !strings.Contains(dout.String(), "records are being lost") {
		t.Errorf("the daemon did not say records were being lost:\n%s", dout)
	}

	// room again: the next target's records all go in, after whole lines
	os.Remove(filler)
	const m = 50
	pidB, runB := waitingHits(t, hits, m/2)
	mustRun(t, "insert", "--socket", sock, "--target", fmt.Sprintf("pid:%d", pidB), probe)
	runB()
	// on the jump route the records of a process come through its ring,
	// drained by the daemon a moment after the hits: wait for them
	per := recordsByPid(t, logPath, readLogFile(t, logPath, true))
	for deadline := time.Now().Add(time.Minute); per[pidB] < m && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		per = recordsByPid(t, logPath, readLogFile(t, logPath, true))
	}
	per = logRecords(t, logPath) // at rest: whole frames only
	if per[pidA] != inFile || per[pidB] != m {
		t.Errorf("after room was made: %d records of pid %d (want %d), %d of pid %d (want %d)", per[pidA], pidA, inFile, per[pidB], pidB, m)
	}
	st, _ = daemon.NewClient(sock).Status()
	if st.Lost.Records != uint64(wantLost) {
		t.Errorf("after room was made: lost %d, want still %d", st.Lost.Records, wantLost)
	}
	// the daemon said when losing began and when writing resumed (a
	// record that happens to fit at the edge of the disk makes several
	// episodes): as many resumptions as beginnings, adding up to the loss
	said := dout.String()
	resumed := 0
	for _, m := range regexp.MustCompile(`writing the log again, (\d+) records? lost`).FindAllStringSubmatch(said, -1) {
		k, _ := strconv.Atoi(m[1])
		resumed += k
	}
	if began := strings.Count(said, "records are being lost"); resumed != wantLost || began != strings.Count(said, "writing the log again") {
		t.Errorf("the daemon's messages add up to %d lost, want %d:\n%s", resumed, wantLost, said)
	}
}

// lostColumn is the LOST column of the one probe of a probe table.
func lostColumn(t *testing.T, out string) string {
	t.Helper()
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		head := strings.Fields(l)
		if len(head) == 0 || head[0] != "TARGET" || i+1 >= len(lines) {
			continue
		}
		row := strings.Fields(lines[i+1])
		for j, h := range head {
			if h == "LOST" && j < len(row) {
				return row[j]
			}
		}
	}
	return "(no LOST column)"
}

var runLost = regexp.MustCompile(`run: (\d+) of (\d+) records could not be written to (\S+) and are lost \(first error: [^)]*no space left on device`)

// gprobes run -o FILE on a full disk: the records the file cannot take are
// counted, the message says how many of how many and why, the file has
// only whole lines, and the exit status is 74 (the command itself exits 0).
func TestRunOutputFullDisk(t *testing.T) {
	hits := buildHits(t)
	probe := pushProbe(t)
	for _, c := range []struct {
		name string
		room int // bytes left on the disk (-1: none)
	}{{"part", 16 << 10}, {"none", -1}} {
		t.Run(c.name, func(t *testing.T) {
			dir := mountTmpfs(t, "64k")
			if c.room < 0 {
				fill(t, dir, -1)
			} else {
				fill(t, dir, 64<<10-c.room)
			}
			const n = 500
			file := filepath.Join(dir, "records.jsonl")
			out, errs, code := gprobes(t, "run", "-o", file, probe, "--", hits, "-n", strconv.Itoa(n/2))
			if code != exitLost {
				t.Fatalf("exit %d, want %d\n%s%s", code, exitLost, out, errs)
			}
			if !strings.Contains(out, fmt.Sprintf("lv 0=%d", n)) {
				t.Fatalf("the summary does not count %d hits:\n%s", n, out)
			}
			mm := runLost.FindStringSubmatch(errs)
			if mm == nil {
				t.Fatalf("the summary does not say what was lost: %q", errs)
			}
			lost, _ := strconv.Atoi(mm[1])
			total, _ := strconv.Atoi(mm[2])
			inFile := 0
			for _, k := range logRecords(t, file) {
				inFile += k
			}
			if total != n || lost != n-inFile || mm[3] != file {
				t.Errorf("%q: want %d of %d lost (%d in the file)", mm[0], n-inFile, n, inFile)
			}
			if c.room < 0 && inFile != 0 || c.room > 0 && (inFile == 0 || inFile == n) {
				t.Errorf("%d records in the file with %d bytes of room", inFile, c.room)
			}
			if !strings.Contains(errs, "exited with status 0") {
				t.Errorf("the message does not give the command's status: %q", errs)
			}
			if lostColumn(t, out) != strconv.Itoa(lost) {
				t.Errorf("the probe's LOST column is not %d:\n%s", lost, out)
			}
		})
	}
}

// gprobes run -q -o FILE writes the records to FILE and prints only the
// summary.
func TestRunQuietOutput(t *testing.T) {
	hits := buildHits(t)
	probe := pushProbe(t)
	file := filepath.Join(t.TempDir(), "records.jsonl")
	const n = 300
	out := mustRun(t, "run", "-q", "-o", file, probe, "--", hits, "-n", strconv.Itoa(n/2))
	inFile := 0
	for _, k := range logRecords(t, file) {
		inFile += k
	}
	if inFile != n || strings.Contains(out, `"kind"`) {
		t.Errorf("%d records in the file, want %d; output:\n%s", inFile, n, out)
	}
}

// Rotation of the daemon's log by size: a reader following the log gets
// every record once, in order, across the rotations; the files kept are
// within the size, hold whole lines and are the newest; gprobes log reads
// them all.
func TestDaemonLogRotation(t *testing.T) {
	hits := buildHits(t)
	state := filepath.Join(t.TempDir(), "state")
	// a record takes some 50 bytes of the binary log
	const maxSize, keep = 4 << 10, 4
	sock, _ := startDaemonIn(t, state, "--log-max-size", "4k", "--log-keep", strconv.Itoa(keep))
	exe, _ := os.Executable()
	follow := exec.Command(exe, "log", "--follow", "--json", "--socket", sock)
	follow.Env = append(os.Environ(), "GPROBES_TEST_MAIN=1")
	fout, _ := follow.StdoutPipe()
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { follow.Process.Kill(); follow.Wait() }()
	var mu sync.Mutex
	var followed []daemon.LogLine
	go func() {
		sc := bufio.NewScanner(fout)
		for sc.Scan() {
			var l daemon.LogLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				l.Kind = "bad line: " + sc.Text()
			}
			mu.Lock()
			followed = append(followed, l)
			mu.Unlock()
		}
	}()
	probe := pushProbe(t)
	// waves of 100 records (about 2 rotations each); the follower reads a
	// wave before the next one starts, so it is never more than --log-keep
	// rotations behind
	const waves, per = 8, 100
	var pids []int
	for w := 0; w < waves; w++ {
		pid, run := waitingHits(t, hits, per/2)
		pids = append(pids, pid)
		mustRun(t, "insert", "--socket", sock, "--target", fmt.Sprintf("pid:%d", pid), probe)
		run()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			mu.Lock()
			got := len(followed)
			mu.Unlock()
			if got >= (w+1)*per {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("wave %d: the follower has %d records of %d", w, got, (w+1)*per)
			}
		}
	}
	// not a wait: a moment for a record too many to show up, were there
	// one; anything more would be a bug
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	got := append([]daemon.LogLine(nil), followed...)
	mu.Unlock()
	if len(got) != waves*per {
		t.Errorf("followed %d lines, want %d", len(got), waves*per)
	}
	for i, l := range got {
		if l.Kind != "log" || l.Pid != pids[min(i/per, waves-1)] {
			t.Fatalf("followed line %d: kind %q pid %d, want record %d of pid %d", i, l.Kind, l.Pid, i%per, pids[min(i/per, waves-1)])
		}
	}
	// the files
	var order []int
	for k := keep; k >= 0; k-- {
		name := daemon.LogFileName
		if k > 0 {
			name += "." + strconv.Itoa(k)
		}
		path := filepath.Join(state, name)
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if fi.Size() > int64(maxSize) {
			t.Errorf("%s: %d bytes, more than %d", name, fi.Size(), maxSize)
		}
		b := logFileJSON(t, path) // whole records
		for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
			var l daemon.LogLine
			json.Unmarshal([]byte(line), &l)
			order = append(order, l.Pid)
		}
	}
	if _, err := os.Stat(filepath.Join(state, fmt.Sprintf("log.jsonl.%d", keep+1))); err == nil {
		t.Errorf("log.jsonl.%d is kept, want %d rotated files", keep+1, keep)
	}
	// what is kept is the tail of what was followed
	if len(order) >= len(got) || len(order) == 0 {
		t.Fatalf("%d records kept of %d: the log did not rotate", len(order), len(got))
	}
	for i, pid := range order {
		if want := got[len(got)-len(order)+i].Pid; pid != want {
			t.Fatalf("kept record %d is of pid %d, want %d", i, pid, want)
		}
	}
	out, errs, code := gprobes(t, "log", "--socket", sock, "--json")
	if code != 0 || strings.Count(out, "\n") != len(order) || errs != "" {
		t.Errorf("log: exit %d, %d lines (want %d), stderr %q", code, strings.Count(out, "\n"), len(order), errs)
	}
}
