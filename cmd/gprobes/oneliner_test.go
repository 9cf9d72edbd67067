package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/internal/testkit"
)

// gprobesStdin runs gprobes (this test binary) in a process of its own
// with stdin as its standard input, and returns its standard output and
// error and its exit status.
func gprobesStdin(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	exe, _ := os.Executable()
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), "GPROBES_TEST_MAIN=1")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// A one-liner: run -e TEXT probes a real process, its statements
// separated by ';' on one line, and each -e is a line of its own.
func TestRunOneLiner(t *testing.T) {
	hits := buildHits(t)
	text := fmt.Sprintf("name = %s; modtype = user; vars = 1; offset = probed; inc lv,0; push d,16; push r,rsi; log str; exit 1", hits)
	out := mustRun(t, "run", "-e", text, "--", hits, "-n", "5")
	if !strings.Contains(out, "lv 0=5") || strings.Count(out, `"alpha"`) != 2 || strings.Count(out, `"beta"`) != 1 {
		t.Errorf("run -e: want lv 0=5 and the words of 5 calls:\n%s", out)
	}
	// -e repeated: one line each, so a directive has its own
	testkit.Need(t, "cpp")
	out = mustRun(t, "run", "-e", "#define CALLS lv,0", "-e", fmt.Sprintf("name = %s; modtype = user; vars = 1", hits),
		"-e", "offset = probed; inc CALLS // a comment ends its line: exit 1", "--", hits, "-n", "3")
	if !strings.Contains(out, "lv 0=3") {
		t.Errorf("run with three -e: want lv 0=3:\n%s", out)
	}
	// errors name -e, with the line and a caret
	_, errs, code := gprobes(t, "check", "-e", "name = x; modtype = user; offset = 0x10; push r,rxa")
	if code != 1 || !strings.Contains(errs, `-e:1:49: unknown register "rxa"`) || !strings.Contains(errs, "    1 | name = x;") {
		t.Errorf("check -e with an error: exit %d\n%s", code, errs)
	}
	// -e with no command and no target: the host target
	// (TestRunHostDefault)
}

// insert -e through the daemon, into a running process.
func TestInsertOneLiner(t *testing.T) {
	hits := buildHits(t)
	sock, _ := startDaemon(t)
	target, lines := startLooping(t, hits)
	pid := target.Process.Pid
	mustRun(t, "insert", "--socket", sock, "--target", fmt.Sprintf("pid:%d", pid),
		"-e", fmt.Sprintf("name = %s; modtype = user; vars = 1; offset = f_push; inc lv,0; exit 0", hits))
	roundLine(t, lines)
	roundLine(t, lines) // a whole round under the probe
	out := mustRun(t, "getvars", "--socket", sock, hits)
	if !strings.Contains(out, "lv 0=") || strings.Contains(out, "lv 0=0\n") {
		t.Errorf("getvars after insert -e: %s", out)
	}
	mustRun(t, "remove", "--socket", sock, "--all")
}

// "-" is standard input, and a pipe works wherever a file does: read
// once, through the preprocessor too. Before, check - said "open -: no
// such file or directory" and /dev/stdin gave three false errors.
func TestStdinAndPipes(t *testing.T) {
	testkit.Need(t, "cpp")
	hits := buildHits(t)
	text := fmt.Sprintf("#define WORD push d,16 ; push r,rsi ; log str\nname = %s\nmodtype = user\nvars = 1\noffset = probed\ninc lv,0\nWORD\nexit 1\n", hits)
	for _, args := range [][]string{{"check", "-"}, {"check", "/dev/stdin"}, {"disasm", "-"}, {"build", "-o", filepath.Join(t.TempDir(), "p.ppdf"), "-"}} {
		out, errs, code := gprobesStdin(t, text, args...)
		if code != 0 || errs != "" {
			t.Errorf("%s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
		}
	}
	// the errors of a DPDF on standard input name <stdin> and show its lines
	_, errs, code := gprobesStdin(t, strings.Replace(text, "exit 1", "push r,rxa", 1), "check", "-")
	if code != 1 || !strings.Contains(errs, `<stdin>:8:8: unknown register "rxa"`) || !strings.Contains(errs, "    8 | push r,rxa") {
		t.Errorf("check - with an error: exit %d\n%s", code, errs)
	}
	// build from standard input needs -o: the PPDF has no name to take
	if _, errs, code := gprobesStdin(t, text, "build", "-"); code != 2 || !strings.Contains(errs, "give -o OUT") {
		t.Errorf("build - without -o: exit %d %s", code, errs)
	}
	// a DPDF from standard input probes a real process
	out, errs, code := gprobesStdin(t, text, "run", "-", "--", hits, "-n", "4")
	if code != 0 || !strings.Contains(out, "lv 0=4") || !strings.Contains(out, `"gamma"`) {
		t.Errorf("run -: exit %d\n%s%s", code, out, errs)
	}
	// a PPDF through a pipe (a FIFO here, as a shell's <(cat p.ppdf))
	dir := t.TempDir()
	pp := filepath.Join(dir, "p.ppdf")
	src := filepath.Join(dir, "p.dpdf")
	os.WriteFile(src, []byte(text), 0o644)
	mustRun(t, "build", "-o", pp, src)
	data, _ := os.ReadFile(pp)
	out, errs, code = gprobesStdin(t, string(data), "check", "/dev/stdin")
	if code != 0 || !strings.Contains(out, "/dev/stdin: ok") {
		t.Errorf("check of a PPDF on /dev/stdin: exit %d\n%s%s", code, out, errs)
	}
}
