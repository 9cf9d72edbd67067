package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/internal/otlptest"
)

// Records a person reads: a word and a string the program logged (log 1,
// log str) are shown as a number and a quoted string, in run's output and
// in the daemon's log, from the probe's code; --json keeps the data's
// bytes in hex. Before, both showed "data 00000000000000006c... ".
func TestRecordStrings(t *testing.T) {
	hits := buildHits(t)
	words := []string{"alpha", "beta", "gamma", ""}
	want := func(i int) string { return fmt.Sprintf(" exit 1 data %d %q", i, words[i%4]) }
	text := fmt.Sprintf("name = %s; modtype = user; offset = probed; push r,rdi; log 1; push d,16; push r,rsi; log str; exit 1", hits)
	out := mustRun(t, "run", "-e", text, "--", hits, "-n", "6")
	var got []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, " log ") {
			_, after, _ := strings.Cut(l, " tid ")
			_, after, _ = strings.Cut(after, " ")
			got = append(got, " "+after)
		}
	}
	if len(got) != 6 {
		t.Fatalf("run: %d records, want 6:\n%s", len(got), out)
	}
	for i, g := range got {
		if g != want(i) {
			t.Errorf("run record %d: %q, want %q", i, g, want(i))
		}
	}

	sock, _ := startDaemon(t)
	cmd := exec.Command(hits, "-n", "6", "-w")
	stdin, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	mustRun(t, "insert", "--socket", sock, "--target", fmt.Sprintf("pid:%d", cmd.Process.Pid), "-e", text)
	fmt.Fprintln(stdin)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the fixture: %v", err)
	}
	deadline := time.Now().Add(time.Minute)
	var lines []string
	for {
		lines = lines[:0]
		for _, l := range strings.Split(mustRun(t, "log", "--socket", sock), "\n") {
			if strings.Contains(l, " log ") {
				lines = append(lines, l)
			}
		}
		if len(lines) >= 6 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(lines) != 6 {
		t.Fatalf("log: %d records, want 6:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for i, l := range lines {
		if !strings.HasSuffix(l, want(i)) {
			t.Errorf("log record %d: %q, want it to end %q", i, l, want(i))
		}
	}
	// JSON: the bytes as logged
	js := strings.Split(strings.TrimSpace(mustRun(t, "log", "--socket", sock, "--json")), "\n")
	var rec struct{ Data string }
	if err := json.Unmarshal([]byte(js[1]), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Data != "0100000000000000"+hex.EncodeToString([]byte("beta")) {
		t.Errorf("log --json data %q", rec.Data)
	}
}

// format = "..." shows a real process's records as printf would, from a
// DPDF and from a PPDF built of it (the format travels in the pack).
// Before, format was an unknown keyword.
func TestRecordFormat(t *testing.T) {
	hits := buildHits(t)
	words := []string{"alpha", "beta", "gamma", ""}
	text := fmt.Sprintf("name = %s; modtype = user; offset = probed; format = \"probed(%%ld, \\\"%%s\\\") #%%03d\"; push r,rdi; log 1; push d,16; push r,rsi; log str; push r,rdi; log 1; exit 1", hits)
	dir := t.TempDir()
	pack := dir + "/f.ppdf"
	mustRun(t, "build", "-e", text, "-o", pack)
	for _, src := range [][]string{{"-e", text}, {pack}} {
		out := mustRun(t, append(append([]string{"run"}, src...), "--", hits, "-n", "5")...)
		n := 0
		for _, l := range strings.Split(out, "\n") {
			if !strings.Contains(l, " log ") {
				continue
			}
			want := fmt.Sprintf(" exit 1: probed(%d, %q) #%03d", n, words[n%4], n)
			if !strings.HasSuffix(l, want) {
				t.Errorf("%v: record %q, want it to end %q", src, l, want)
			}
			n++
		}
		if n != 5 {
			t.Errorf("%v: %d records, want 5:\n%s", src, n, out)
		}
	}
}

// The OTLP body of a record follows its probe's format: the forwarder
// asks the daemon for the probes' formats and layouts. A probe without a
// format keeps the short body.
func TestOTLPBodyFormat(t *testing.T) {
	hits := buildHits(t)
	rcv, err := otlptest.Start("auto", "auto")
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close()
	dir := t.TempDir()
	src := filepath.Join(dir, "f.dpdf")
	os.WriteFile(src, []byte(fmt.Sprintf("name = %s\nmodtype = user\noffset = probed\nminor = 1\nformat = \"probed(%%d, %%s)\"\npush r,rdi\nlog 1\npush d,16\npush r,rsi\nlog str\nexit 1\n"+
		"offset = f_load\nminor = 2\npush r,rdi\nlog 1\nexit 1\n", hits)), 0o644)
	sock, state := filepath.Join(dir, "d.sock"), filepath.Join(dir, "state")
	_, dout := daemonProcess(t, sock, state, "--otlp", "grpc://"+rcv.GRPC)
	const n = 8
	target := execHits(t, sock, hits, src, n)
	waitStatus(t, sock, "the fixture's end", 30*time.Second, gone(target))
	words := []string{"alpha", "beta", "gamma", ""}
	var got []otlptest.Record
	for end := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		got = got[:0]
		for _, r := range rcv.Records() {
			if r.Attrs["target"] == target {
				got = append(got, r)
			}
		}
		if len(got) >= 2*n {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("%d of %d records arrived\n%s", len(got), 2*n, dout)
		}
	}
	seen := map[string]bool{}
	for _, r := range got {
		switch r.Attrs["minor"] {
		case int64(1):
			seen[r.Body] = true
		case int64(2):
			if r.Body != fmt.Sprintf("log %s(0,2) f_load exit 1", hits) {
				t.Errorf("a probe without a format: body %q", r.Body)
			}
		}
	}
	for i := 0; i < n; i++ {
		want := fmt.Sprintf("log %s(0,1) probed exit 1: probed(%d, %s)", hits, i, words[i%4])
		if !seen[want] {
			t.Errorf("no record with the body %q; bodies: %v", want, seen)
		}
	}
}
