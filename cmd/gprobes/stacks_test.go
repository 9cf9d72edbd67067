package main

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/perfetto"
)

// framesOf picks the frame lines that follow the first record line of
// text: "    function+0xOFF (module)".
func framesOf(t *testing.T, text string) (record string, names []string, lines []string) {
	t.Helper()
	re := regexp.MustCompile(`^    ([A-Za-z_][A-Za-z0-9_.]*)\+0x[0-9a-f]+ \((/[^)]+)\)$|^    0x[0-9a-f]+ \((/[^)]+)\)$`)
	in := false
	for _, l := range strings.Split(text, "\n") {
		if !in {
			if strings.Contains(l, " log ") {
				record, in = l, true
			}
			continue
		}
		if !strings.HasPrefix(l, "    ") {
			break
		}
		m := re.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("frame line %q is not function+0xOFF (module)", l)
		}
		names = append(names, m[1])
		lines = append(lines, l)
	}
	return record, names, lines
}

// log ustack as a person and a program see it: gprobes run prints the
// record, then its frames one per line as function+0xOFF (module), for a
// binary built with gcc -O2 (no frame pointers) through 3 levels of
// recursion: leaf, fact x4, run, main, libc, _start. --json carries the
// frames' addresses (the same as in the data) and names. The daemon's
// log shows the same lines from log.jsonl, and log --json the same
// stacks.
func TestRunUstack(t *testing.T) {
	prog := testkit.CC(t, "fact-O2", "-O2", "../../testdata/stacks/fact.c")
	text := fmt.Sprintf("name = %s; modtype = user; offset = leaf; push d,42; log 1; log ustack; exit 1", prog)
	want := "leaf fact fact fact fact run main"
	check := func(what, out string) []string {
		t.Helper()
		rec, names, lines := framesOf(t, out)
		if !strings.HasSuffix(rec, " exit 1 data 42 ustack") {
			t.Errorf("%s: record line %q", what, rec)
		}
		if len(names) < 9 || strings.Join(names[:7], " ") != want || names[len(names)-1] != "_start" {
			t.Errorf("%s: frames %q, want %s, libc's, _start", what, lines, want)
		}
		for i, l := range lines {
			if i < 7 && !strings.HasSuffix(l, " ("+prog+")") {
				t.Errorf("%s: frame %q is not in %s", what, l, prog)
			}
		}
		return lines
	}
	out := mustRun(t, "run", "-e", text, "--", prog, "3", "1")
	runLines := check("run", out)

	js := mustRun(t, "run", "--json", "-e", text, "--", prog, "3", "1")
	var rec struct {
		Data   string
		Stacks []struct {
			Kind   string
			Frames []struct {
				Address  string
				Function string
				Offset   uint64
				Module   string
			}
		}
	}
	for _, l := range strings.Split(js, "\n") {
		if strings.HasPrefix(l, "{") && strings.Contains(l, `"kind":"log"`) {
			if err := json.Unmarshal([]byte(l), &rec); err != nil {
				t.Fatalf("%v: %s", err, l)
			}
			break
		}
	}
	data, _ := hex.DecodeString(rec.Data)
	if len(rec.Stacks) != 1 || rec.Stacks[0].Kind != "user" || len(data) != 8+16*8 {
		t.Fatalf("run --json: stacks %+v data %s", rec.Stacks, rec.Data)
	}
	for i, f := range rec.Stacks[0].Frames {
		if w := fmt.Sprintf("0x%x", binary.LittleEndian.Uint64(data[8+8*i:])); w != f.Address {
			t.Errorf("run --json: frame %d at %s, the data says %s", i, f.Address, w)
		}
		if i < 7 && (f.Function != strings.Fields(want)[i] || f.Module != prog) {
			t.Errorf("run --json: frame %d %+v", i, f)
		}
		if i == 0 && f.Offset != 0 || i > 0 && i < 7 && f.Offset == 0 {
			t.Errorf("run --json: frame %d offset %d", i, f.Offset)
		}
	}

	sock, _ := startDaemon(t)
	cmd := exec.Command(prog, "3", "1", "wait")
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
	var logged string
	for {
		logged = mustRun(t, "log", "--socket", sock)
		if strings.Contains(logged, " log ") || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	logLines := check("log", logged)
	// the same frames but for the addresses of this process's mappings
	if len(logLines) != len(runLines) {
		t.Errorf("log: %d frames, run: %d", len(logLines), len(runLines))
	}
	lj := mustRun(t, "log", "--socket", sock, "--json")
	if !strings.Contains(lj, `"stacks":[{"kind":"user","frames":[{"address":"0x`) || !strings.Contains(lj, `"function":"fact","offset":`) {
		t.Errorf("log --json: %s", lj)
	}

	// Perfetto: the stack as an annotation "ustack", a frame a line
	// (address, function+0xOFF, module), from run and from the log
	out1, out2 := filepath.Join(t.TempDir(), "run.pftrace"), filepath.Join(t.TempDir(), "log.pftrace")
	for _, args := range [][]string{
		{"run", "--format", "perfetto", "-o", out1, "-e", text, "--", prog, "3", "1"},
		{"log", "--socket", sock, "--format", "perfetto", "-o", out2},
	} {
		mustRun(t, args...)
		path := out1
		if args[0] == "log" {
			path = out2
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		packets, err := perfetto.Read(b)
		if err != nil {
			t.Fatal(err)
		}
		evs, _, err := perfetto.Resolve(packets)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range evs {
			if a, ok := e.Annotations["ustack"]; ok {
				got = strings.Split(a.String, "\n")
			}
		}
		if len(got) != len(runLines) {
			t.Fatalf("%s --format perfetto: ustack %q, want %d frames", args[0], got, len(runLines))
		}
		for i, l := range got {
			addr, rest, _ := strings.Cut(l, " ")
			if !strings.HasPrefix(addr, "0x") || "    "+rest != runLines[i] && (i >= 7 || !strings.HasPrefix(rest, strings.Fields(want)[i]+"+0x")) {
				t.Errorf("%s --format perfetto: frame %d %q, run showed %q", args[0], i, l, runLines[i])
			}
		}
	}
}
