package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Hostile DPDFs through every command that reads one (docs/language.md,
// "File structure": errors are made safe for a terminal): nothing crashes, every error is positioned, check and build say the
// same, and no byte of the file that a terminal acts on is echoed raw.

const hostileHeader = "name = x\nmodtype = user\noffset = 1\n"

func writeDPDF(t *testing.T, dir, name, src string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDeepNestingEveryCommand: 200,000 nested parentheses (a 400 KB DPDF)
// crashed check, build, disasm, sim, insert and run with a Go stack
// overflow. Each now refuses the file with one positioned error at the
// first parenthesis past the limit, before anything else happens (insert
// and run compile on the client, before they reach a daemon or a target).
func TestDeepNestingEveryCommand(t *testing.T) {
	const n = 200000
	dir := t.TempDir()
	src := writeDPDF(t, dir, "deep.dpdf", hostileHeader+"push d,"+strings.Repeat("(", n)+"1"+strings.Repeat(")", n)+"\nexit\n")
	want := src + ":4:264: expression nested too deeply: at most 256 levels"
	sock := filepath.Join(dir, "no-daemon.sock")
	for _, args := range [][]string{
		{"check", src},
		{"build", "-o", filepath.Join(dir, "deep.ppdf"), src},
		{"disasm", src},
		{"sim", src},
		{"insert", "--socket", sock, "--target", "pid:1", src},
		{"run", "--target", "pid:1", src},
	} {
		out, errs, code := gprobes(t, args...)
		if code != 1 || out != "" || !strings.HasPrefix(errs, want) || strings.Count(errs, "nested too deeply") != 1 {
			t.Errorf("%s: exit %d, stdout %q, stderr %.300q", args[0], code, out, errs)
		}
		if len(errs) > 1000 {
			t.Errorf("%s: %d bytes of errors for one error", args[0], len(errs))
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "deep.ppdf")); err == nil {
		t.Error("build wrote a PPDF")
	}
}

// TestCheckAndBuildAgree: every limit of the PPDF format is checked by the
// compiler, so that check refuses what build would refuse, with the same
// positioned error. check accepted a 1 MB symbol name and a 100 KB module
// name that build then refused without a position.
func TestCheckAndBuildAgree(t *testing.T) {
	dir := t.TempDir()
	big := func(n int) string { return strings.Repeat("s", n) }
	for _, c := range []struct {
		name, src string
		want      string // after "FILE:"
	}{
		{"module name", "name = " + big(100000) + "\nmodtype = user\noffset = 1\nexit\n",
			"1:8: the module name is 100000 bytes, at most 65536"},
		{"quoted module name", "name = \"" + big(70000) + "\"\nmodtype = user\noffset = 1\nexit\n",
			"1:8: the module name is 70000 bytes, at most 65536"},
		{"symbol location", hostileHeader + "offset = " + big(1<<20) + "+4\nexit\n",
			"4:10: the location is 1048578 bytes, at most 65536"},
		{"source line location", hostileHeader + "offset = " + big(70000) + ".c:12\nexit\n",
			"4:10: the location is 70005 bytes, at most 65536"},
		{"symbol in push d", hostileHeader + "push d," + big(1<<20) + "\nexit\n",
			"4:8: an expression with symbols is 1048576 bytes, at most 65536"},
		{"deep nesting", hostileHeader + "push d," + strings.Repeat("-", 1000) + "1\nexit\n",
			"4:264: expression nested too deeply"},
		{"long sum", hostileHeader + "push d,1" + strings.Repeat("+1", 1000) + "\nexit\n",
			"4:521: expression nested too deeply"},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := writeDPDF(t, dir, strings.ReplaceAll(c.name, " ", "_")+".dpdf", c.src)
			out := filepath.Join(dir, "out.ppdf")
			os.Remove(out)
			want := src + ":" + c.want
			_, checkErr, checkCode := gprobes(t, "check", src)
			_, buildErr, buildCode := gprobes(t, "build", "-o", out, src)
			if checkCode != 1 || !strings.HasPrefix(checkErr, want) {
				t.Errorf("check: exit %d, %.200q\nwant %.200q", checkCode, checkErr, want)
			}
			if buildCode != 1 || buildErr != checkErr {
				t.Errorf("build: exit %d, %.200q\ncheck said %.200q", buildCode, buildErr, checkErr)
			}
			if _, err := os.Stat(out); err == nil {
				t.Error("build wrote a PPDF")
			}
		})
	}
	// at the limits, both accept, and the PPDF holds what was written
	src := writeDPDF(t, dir, "limits.dpdf", "name = "+big(65536)+"\nmodtype = user\noffset = "+big(65536)+"\npush d,"+big(65536)+"\nexit\n")
	mustRun(t, "check", src)
	mustRun(t, "build", "-o", filepath.Join(dir, "limits.ppdf"), src)
	if out := mustRun(t, "disasm", filepath.Join(dir, "limits.ppdf")); !strings.Contains(out, "offset = "+big(65536)+" (resolved at insert)") {
		t.Errorf("disasm of the PPDF at the limits: %.200s", out)
	}
}

// TestErrorsEscapeTerminalBytes: the source line quoted under an error,
// and the error itself, never carry the DPDF's escape sequences raw.
func TestErrorsEscapeTerminalBytes(t *testing.T) {
	dir := t.TempDir()
	src := writeDPDF(t, dir, "esc.dpdf", hostileHeader+"push r,\x1b]0;owned\x07\x1b[2Jrax ; push d,\xff\xfe\nexit\n")
	for _, cmd := range []string{"check", "build", "sim", "disasm"} {
		_, errs, code := gprobes(t, cmd, src)
		if code != 1 {
			t.Errorf("%s: exit %d", cmd, code)
		}
		for i := 0; i < len(errs); i++ {
			if b := errs[i]; b < 0x20 && b != '\n' && b != '\t' || b >= 0x7f {
				t.Fatalf("%s: raw byte %#x in\n%s", cmd, b, errs)
			}
		}
		for _, want := range []string{
			src + `:4:8: unexpected control character '\x1b'`,
			`    4 | push r,\x1b]0;owned\x07\x1b[2Jrax ; push d,\xff\xfe`,
		} {
			if !strings.Contains(errs, want) {
				t.Errorf("%s: %q missing from\n%s", cmd, want, errs)
			}
		}
	}
}

// TestByteOrderMarkThroughTheCLI: a file saved with a UTF-8 byte order
// mark checks, builds and runs; positions on line 1 do not count it.
func TestByteOrderMarkThroughTheCLI(t *testing.T) {
	dir := t.TempDir()
	ok := writeDPDF(t, dir, "bom.dpdf", "\ufeff"+hostileHeader+"push d,7\nlog 1\nexit\n")
	mustRun(t, "check", ok)
	mustRun(t, "build", "-o", filepath.Join(dir, "bom.ppdf"), ok)
	if out := mustRun(t, "sim", ok); !strings.Contains(out, "07 00 00 00 00 00 00 00") {
		t.Errorf("sim: %s", out)
	}
	bad := writeDPDF(t, dir, "bad.dpdf", "\ufeffname = x\nmodtype = usr\noffset = 1\nexit\n")
	_, errs, _ := gprobes(t, "check", bad)
	if want := bad + ":2:11: modtype must be"; !strings.HasPrefix(errs, want) {
		t.Errorf("got %s, want %s", errs, want)
	}
	bad1 := writeDPDF(t, dir, "bad1.dpdf", "\ufeffmajor = 70000\nname = x\nmodtype = user\noffset = 1\nexit\n")
	_, errs, _ = gprobes(t, "check", bad1)
	if want := fmt.Sprintf("%s:1:9: major must be 0..65535, not 70000\n    1 | major = 70000\n      |         ^\n", bad1); errs != want {
		t.Errorf("got\n%swant\n%s", errs, want)
	}
}
