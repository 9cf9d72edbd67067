package rpn_test

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/compiler"
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/sim"
)

// The semantics of every instruction are specified case by case in
// testdata/vm.txt; see the comment at its top for the format.

type vmCase struct {
	name   string
	line   int // line of "===" in vm.txt
	src    []string
	env    []string
	want   []string
	i386   bool
	kernel bool
}

func readCases(t *testing.T, path string) []*vmCase {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cases []*vmCase
	var cur *vmCase
	section := ""
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "=== "):
			cur = &vmCase{name: strings.TrimPrefix(line, "=== "), line: n}
			cases = append(cases, cur)
			section = "src"
		case cur == nil, strings.HasPrefix(line, "#") && section != "src":
		case line == "--- env":
			section = "env"
		case line == "--- want":
			section = "want"
		case strings.TrimSpace(line) == "":
		default:
			switch section {
			case "src":
				cur.src = append(cur.src, line)
			case "env":
				cur.env = append(cur.env, line)
			case "want":
				cur.want = append(cur.want, line)
			}
		}
	}
	return cases
}

// source completes a case's DPDF: a default header and probe line unless
// the case writes its own.
func (c *vmCase) source() string {
	var hdr, body []string
	hasName, hasType, hasOffset := false, false, false
	inBody := false
	for _, l := range c.src {
		t := strings.ToLower(strings.TrimSpace(l))
		isKey := strings.Contains(t, "=") && !strings.HasPrefix(t, "push") && !strings.HasPrefix(t, "//")
		if strings.HasPrefix(t, "name") {
			hasName = true
		}
		if strings.HasPrefix(t, "modtype") {
			hasType = true
		}
		start := strings.HasPrefix(t, "offset") || strings.HasPrefix(t, "retprobe") || strings.HasPrefix(t, "tracepoint") || strings.HasPrefix(t, "watch")
		if start {
			hasOffset = true
		}
		if !inBody && (!isKey || isProbeKey(t)) {
			if !hasOffset && !start {
				body = append(body, "offset = 0x1000")
				hasOffset = true
			}
			inBody = true
		}
		if inBody || start {
			inBody = true
			body = append(body, l)
		} else {
			hdr = append(hdr, l)
		}
	}
	var b strings.Builder
	if !hasName {
		b.WriteString("name = test\n")
	}
	if !hasType {
		b.WriteString("modtype = user\n")
	}
	for _, l := range hdr {
		b.WriteString(l + "\n")
	}
	if !hasOffset {
		b.WriteString("offset = 0x1000\n")
	}
	for _, l := range body {
		b.WriteString(l + "\n")
	}
	return b.String()
}

func isProbeKey(t string) bool {
	k := strings.ReplaceAll(strings.ReplaceAll(strings.SplitN(t, "=", 2)[0], " ", ""), "_", "")
	switch k {
	case "opcode", "minor", "passcount", "maxhits", "logonfault", "maxactive", "enabled":
		return true
	}
	return false
}

func num(t *testing.T, s string) uint64 {
	t.Helper()
	neg := strings.HasPrefix(s, "-")
	v, err := dpdf.ParseNumber(strings.TrimPrefix(s, "-"))
	if err != nil && s != "0" {
		t.Fatalf("bad number %q: %v", s, err)
	}
	if neg {
		v = -v
	}
	return v
}

func TestVMCases(t *testing.T) {
	for _, c := range readCases(t, "testdata/vm.txt") {
		t.Run(c.name, func(t *testing.T) {
			src := c.source()
			f, err := dpdf.ParseSource(fmt.Sprintf("vm.txt:%d", c.line), []byte(src), dpdf.Options{})
			var m *rpn.Module
			if err == nil {
				m, err = compiler.Compile(f, rpn.CompileOptions{})
			}
			if len(c.want) > 0 && strings.HasPrefix(c.want[0], "error ") {
				if err == nil {
					t.Fatalf("compiled, want error %q\n%s", c.want[0][6:], src)
				}
				for _, w := range c.want {
					if !strings.Contains(err.Error(), strings.TrimPrefix(w, "error ")) && !containsAll(err, strings.TrimPrefix(w, "error ")) {
						t.Errorf("error %q does not contain %q", errText(err), strings.TrimPrefix(w, "error "))
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("compile: %s\n%s", errText(err), src)
			}
			prog, err := rpn.Load(m)
			if err != nil {
				t.Fatalf("load: %+v", err)
			}
			env := sim.NewEnv()
			opts := sim.Options{Hits: 1, LV: map[uint64]uint64{}, GV: map[uint64]uint64{}, IV: map[uint64]uint64{}}
			for _, l := range c.env {
				f := strings.Fields(l)
				switch f[0] {
				case "reg":
					for _, a := range f[1:] {
						k, v, _ := strings.Cut(a, "=")
						if err := env.SetRegByName(m.Arch, k, num(t, v)); err != nil {
							t.Fatal(err)
						}
					}
				case "mem":
					for _, a := range f[1:] {
						k, v, _ := strings.Cut(a, "=")
						data, err := hex.DecodeString(v)
						if err != nil {
							t.Fatal(err)
						}
						if err := env.AddMem(num(t, k), data); err != nil {
							t.Fatal(err)
						}
					}
				case "sys":
					names := map[string]rpn.SysValue{"pid": rpn.SysPID, "tid": rpn.SysTID, "procid": rpn.SysProcID, "task": rpn.SysTask, "ts": rpn.SysTS}
					for _, a := range f[1:] {
						k, v, _ := strings.Cut(a, "=")
						env.SetSys(names[k], num(t, v))
					}
				case "io":
					for _, a := range f[1:] {
						k, v, _ := strings.Cut(a, "=")
						env.AddIO(num(t, k), num(t, v))
					}
				case "field":
					for _, a := range f[1:] {
						k, v, _ := strings.Cut(a, "=")
						env.SetField(k, num(t, v))
					}
				case "hits":
					opts.Hits = int(num(t, f[1]))
				case "probe":
					opts.Probe = int(num(t, f[1]))
				case "lv", "gv", "iv":
					for _, a := range f[1:] {
						k, v, _ := strings.Cut(a, "=")
						map[string]map[uint64]uint64{"lv": opts.LV, "gv": opts.GV, "iv": opts.IV}[f[0]][num(t, k)] = num(t, v)
					}
				default:
					t.Fatalf("unknown env line %q", l)
				}
			}
			rep, err := sim.Run(prog, env, opts)
			if err != nil {
				t.Fatal(err)
			}
			hit := 0
			switchesChecked := map[int]bool{}
			for _, w := range c.want {
				f := strings.Fields(w)
				switch f[0] {
				case "hit":
					if hit >= len(rep.Hits) {
						t.Fatalf("want hit %d, only %d hits", hit+1, len(rep.Hits))
					}
					checkHit(t, hit+1, rep.Hits[hit], f[1:])
					hit++
				case "switched":
					// the switches of the hit checked last
					if hit == 0 {
						t.Fatalf("%q before any hit", w)
					}
					switchesChecked[hit-1] = true
					if got, want := strings.Join(rep.Hits[hit-1].Switches, ", "), strings.TrimSpace(strings.TrimPrefix(w, "switched")); got != want {
						t.Errorf("hit %d switched %q, want %q", hit, got, want)
					}
				case "lv", "gv", "iv":
					got := map[string][]string{"lv": rep.LV, "gv": rep.GV, "iv": rep.IV}[f[0]]
					var want []string
					for _, v := range f[1:] {
						want = append(want, strconv.FormatUint(num(t, v), 10))
					}
					if strings.Join(got, " ") != strings.Join(want, " ") {
						t.Errorf("%s = %v, want %v", f[0], got, want)
					}
				case "disabled", "enabled":
					if rep.Disabled != (f[0] == "disabled") {
						t.Errorf("disabled = %v, want %s", rep.Disabled, f[0])
					}
				case "reg":
					for _, a := range f[1:] {
						k, v, _ := strings.Cut(a, "=")
						r, ok := rpn.LookupReg(rpn.ArchX86_64, k)
						if !ok {
							t.Fatalf("unknown register %s", k)
						}
						got, _ := env.Reg(r.Canonical(), false)
						if got != num(t, v) {
							t.Errorf("register %s = %#x, want %#x", k, got, num(t, v))
						}
					}
				case "mem":
					for _, a := range f[1:] {
						k, v, _ := strings.Cut(a, "=")
						want, _ := hex.DecodeString(v)
						got := make([]byte, len(want))
						if !env.ReadMem(num(t, k), got) || hex.EncodeToString(got) != v {
							t.Errorf("memory at %s = %x, want %s", k, got, v)
						}
					}
				case "io":
					for _, a := range f[1:] {
						k, v, _ := strings.Cut(a, "=")
						got, _ := env.IO(num(t, k), 4, false, 0)
						if got != num(t, v) {
							t.Errorf("port %s = %#x, want %s", k, got, v)
						}
					}
				default:
					t.Fatalf("unknown want line %q", w)
				}
			}
			if hit != len(rep.Hits) {
				t.Errorf("%d hits ran, the case checks %d", len(rep.Hits), hit)
			}
			for i, h := range rep.Hits {
				if len(h.Switches) > 0 && !switchesChecked[i] {
					t.Errorf("hit %d switched %q: the case does not say (\"switched ...\" after its hit line)", i+1, h.Switches)
				}
			}
		})
	}
}

// checkHit compares one hit with "OUTCOME [N] [exception X] [log HEX]
// [truncated] [major N] [minor N]". An unmentioned log must be empty.
func checkHit(t *testing.T, n int, h sim.Hit, want []string) {
	t.Helper()
	if h.Outcome != want[0] {
		t.Errorf("hit %d: outcome %s (exception %q), want %s", n, h.Outcome, h.Exception, want[0])
		return
	}
	wantLog, wantTrunc, wantEx := "", false, ""
	for i := 1; i < len(want); i++ {
		switch want[i] {
		case "exception":
			i++
			wantEx = want[i]
		case "log":
			// the hex may be split into groups for readability
			for i+1 < len(want) && isHex(want[i+1]) {
				i++
				wantLog += want[i]
			}
		case "truncated":
			wantTrunc = true
		case "major":
			i++
			if h.Major != uint16(num(t, want[i])) {
				t.Errorf("hit %d: major %d, want %s", n, h.Major, want[i])
			}
		case "minor":
			i++
			if h.Minor != uint16(num(t, want[i])) {
				t.Errorf("hit %d: minor %d, want %s", n, h.Minor, want[i])
			}
		default:
			if e, err := strconv.Atoi(want[i]); err == nil {
				if int(h.Exit) != e {
					t.Errorf("hit %d: exit %d, want %d", n, h.Exit, e)
				}
				continue
			}
			t.Fatalf("bad hit expectation %q", want[i])
		}
	}
	if h.Exception != wantEx {
		t.Errorf("hit %d: exception %q, want %q", n, h.Exception, wantEx)
	}
	if h.Log != wantLog {
		t.Errorf("hit %d: log %s, want %s", n, h.Log, wantLog)
	}
	if h.Truncated != wantTrunc {
		t.Errorf("hit %d: truncated %v, want %v", n, h.Truncated, wantTrunc)
	}
}

func errText(err error) string {
	var b strings.Builder
	dpdf.PrintError(&b, err, false)
	return b.String()
}

func containsAll(err error, s string) bool {
	return strings.Contains(errText(err), s)
}

func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil && len(s) > 1
}
