package dpdf

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/alecthomas/participle/v2/lexer"

	"github.com/gprobes/gprobes/internal/testkit"
)

// needCPP fails the test under CI when there is no C preprocessor, and
// skips it on a developer machine without one.
func needCPP(t *testing.T) {
	t.Helper()
	if _, err := findCPP(Options{}); err != nil {
		testkit.SkipOrFail(t, "%v", err)
	}
}

func parseString(t *testing.T, src string) *File {
	t.Helper()
	f, err := ParseSource("t.dpdf", []byte(src), Options{NoPreprocessor: true})
	if err != nil {
		var b strings.Builder
		PrintError(&b, err, true)
		t.Fatalf("parse: %s", b.String())
	}
	return f
}

func TestHeaderAndProbes(t *testing.T) {
	f := parseString(t, `name = /lib/x86_64-linux-gnu/libc.so.6   // a path, unquoted
modtype = user
offset = malloc+0x1c
minor = 1
push r,rdi
exit
offset = fs/open.c:1234
exit
offset = foo.isra.0
exit
`)
	if len(f.Header) != 2 || len(f.Probes) != 3 {
		t.Fatalf("header %d probes %d", len(f.Header), len(f.Probes))
	}
	if got := *f.Header[0].Value.Str; got != "/lib/x86_64-linux-gnu/libc.so.6" {
		t.Errorf("name = %q", got)
	}
	if got := f.Probes[0].Offset.Value.Text; got != "malloc+0x1c" {
		t.Errorf("offset text = %q", got)
	}
	if f.Probes[1].Offset.Value.Line == nil || *f.Probes[1].Offset.Value.Line != "fs/open.c:1234" {
		t.Errorf("source line offset not recognised: %+v", f.Probes[1].Offset.Value)
	}
	n := f.Probes[2].Offset.Value.Expr.Tree(nil)
	if s, ok := n.(*Sym); !ok || s.Name != "foo.isra.0" {
		t.Errorf("dotted symbol = %#v", n)
	}
	if len(f.Probes[0].Keys) != 1 || len(f.Probes[0].Body) != 2 {
		t.Errorf("probe 0: %d keys, %d statements", len(f.Probes[0].Keys), len(f.Probes[0].Body))
	}
}

func TestKeywordSpellings(t *testing.T) {
	for _, k := range []string{"pass count", "passcount", "pass_count", "Pass Count", "PASS_COUNT", "pass  count"} {
		f := parseString(t, "name = x\nmodtype = user\noffset = 1\n"+k+" = 3\nexit\n")
		if got := f.Probes[0].Keys[0].Norm(); got != "passcount" {
			t.Errorf("%q normalises to %q", k, got)
		}
	}
	for _, k := range []string{"max hits", "maxhits", "max_hits", "Max Hits"} {
		f := parseString(t, "name = x\nmodtype = user\noffset = 1\n"+k+" = 3\nexit\n")
		if got := f.Probes[0].Keys[0].Norm(); got != "maxhits" {
			t.Errorf("%q normalises to %q", k, got)
		}
	}
}

func TestPositions(t *testing.T) {
	f := parseString(t, "name = x\nmodtype = user\noffset = 1\n  lbl:   push   d , 3 ; exit\n")
	body := f.Probes[0].Body
	if body[0].Label.Pos.Line != 4 || body[0].Label.Pos.Column != 3 {
		t.Errorf("label at %v", body[0].Label.Pos)
	}
	if p := body[0].Instr.Pos; p.Line != 4 || p.Column != 10 {
		t.Errorf("push at %v", p)
	}
	if p := body[0].Instr.Push.Const.Pos; p.Column != 21 {
		t.Errorf("constant at %v", p)
	}
	if p := body[1].Instr.Pos; p.Line != 4 || p.Column != 25 {
		t.Errorf("exit at %v", p)
	}
}

func TestExpressions(t *testing.T) {
	for _, c := range []struct {
		src  string
		want uint64
	}{
		{"1+2*3", 7},
		{"(1+2)*3", 9},
		{"1<<4|1", 17},
		{"1|1<<4", 17},
		{"10-4-3", 3},
		{"100/10/5", 2},
		{"-1", ^uint64(0)},
		{"~0xff&0xfff", 0xf00},
		{"7%4", 3},
		{"1^3&1", 0},
		{"2*-3", ^uint64(5)},
		{"'a'", 97},
		{"0x_ff", 255},
		{"1 << 64", 0},
	} {
		n, err := ParseExpr(c.src)
		if err != nil {
			t.Errorf("%s: %v", c.src, err)
			continue
		}
		v, err := Eval(n, nil)
		if err != nil || v != c.want {
			t.Errorf("%s = %d, %v; want %d", c.src, v, err, c.want)
		}
	}
	n, err := ParseExpr("sizeof(struct task_struct) + offsetof(struct task_struct, signal.rlim[3].x) + jiffies")
	if err != nil {
		t.Fatal(err)
	}
	if !External(n) {
		t.Error("expression with symbols is not external")
	}
	want := "((sizeof(struct task_struct) + offsetof(struct task_struct, signal.rlim[3].x)) + jiffies)"
	if n.String() != want {
		t.Errorf("tree %s, want %s", n, want)
	}
	// the canonical form parses back to the same tree
	n2, err := ParseExpr(n.String())
	if err != nil || n2.String() != n.String() {
		t.Errorf("round trip: %v %v", n2, err)
	}
}

func TestErrorsCarryPositionsAndCarets(t *testing.T) {
	_, err := ParseSource("bad.dpdf", []byte("name = x\nmodtype = user\noffset = 1\n\tpush q\npop r,\n"), Options{NoPreprocessor: true})
	l, ok := err.(ErrorList)
	if !ok || len(l) != 2 {
		t.Fatalf("want 2 errors, got %v", err)
	}
	if l[0].Error() != `bad.dpdf:4:7: unexpected "q": expected push r,REG | u,REG | d,EXPR | lv[,I] | gv[,I] | iv,I | mrf[,SIZE] | io,SIZE | field,NAME | arg,N | pid | tid | procid | task | ts | lp` {
		t.Errorf("got %q", l[0].Error())
	}
	detail := l[0].Detail()
	if !strings.Contains(detail, "    4 | \tpush q\n      | \t     ^") {
		t.Errorf("caret display:\n%s", detail)
	}
}

func TestDirectivesWithoutPreprocessorAreErrors(t *testing.T) {
	_, err := ParseSource("t.dpdf", []byte("#define X 1\nname = x\n"), Options{NoPreprocessor: true})
	if err == nil || !strings.Contains(err.Error(), "t.dpdf:1:1: preprocessor directive") {
		t.Errorf("got %v", err)
	}
}

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestPreprocessor(t *testing.T) {
	needCPP(t)
	dir := writeFiles(t, map[string]string{
		"inc/defs.h": "#define LOGSTACK push d,16 ; push r,rsp ; log mrf\n#define PROBE(sym, n) offset = sym ; minor = n\n",
		"p.dpdf": `#include "defs.h"
name = /lib/libc.so.6
modtype = user
#ifdef WANT_MAJOR
major = WANT_MAJOR
#endif
PROBE(malloc, 3)
	LOGSTACK
exit
`,
	})
	path := filepath.Join(dir, "p.dpdf")
	f, err := Parse(path, Options{Includes: []string{filepath.Join(dir, "inc")}, Defines: []string{"WANT_MAJOR=7"}})
	if err != nil {
		t.Fatal(err)
	}
	if !f.Preprocessed {
		t.Error("not preprocessed")
	}
	if len(f.Header) != 3 || f.Header[2].Value.Text != "7" {
		t.Errorf("header: %d keys", len(f.Header))
	}
	if len(f.Probes) != 1 || f.Probes[0].Offset.Value.Text != "malloc" || len(f.Probes[0].Keys) != 1 {
		t.Fatalf("probes: %+v", f.Probes)
	}
	if got := len(f.Probes[0].Body); got != 4 {
		t.Errorf("%d statements from the macro and exit, want 4", got)
	}
	// positions point at the user's file and line
	if p := f.Probes[0].Body[3].Pos; p.Filename != path || p.Line != 9 {
		t.Errorf("exit at %v", p)
	}
	want := []string{path, filepath.Join(dir, "inc", "defs.h")}
	if strings.Join(f.Deps, " ") != strings.Join(want, " ") {
		t.Errorf("deps %v, want %v", f.Deps, want)
	}
}

func TestPreprocessorErrorPositions(t *testing.T) {
	needCPP(t)
	dir := writeFiles(t, map[string]string{
		"inc.h":  "// an include with a mistake\n   push   q\n",
		"p.dpdf": "name = x\nmodtype = user\noffset = 1\n#include \"inc.h\"\n\t  push   d ,  X\nexit\n",
		"m.dpdf": "#include \"nothere.h\"\nname = x\n",
	})
	_, err := Parse(filepath.Join(dir, "p.dpdf"), Options{})
	l, ok := err.(ErrorList)
	if !ok || len(l) != 1 {
		t.Fatalf("got %v", err)
	}
	// inside the included file, at the column of the original text
	if e := l[0]; e.Pos.Filename != filepath.Join(dir, "inc.h") || e.Pos.Line != 2 || e.Pos.Column != 11 {
		t.Errorf("error at %v: %s", e.Pos, e.Detail())
	}
	if !strings.Contains(l[0].Detail(), "    2 |    push   q\n      |           ^") {
		t.Errorf("caret:\n%s", l[0].Detail())
	}
	// the preprocessor's own errors come back positioned too
	_, err = Parse(filepath.Join(dir, "m.dpdf"), Options{})
	if err == nil || !strings.Contains(err.Error(), "m.dpdf:1:10: ") || !strings.Contains(err.Error(), "nothere.h") {
		t.Errorf("missing include: %v", err)
	}
}

func TestPreprocessorMissing(t *testing.T) {
	dir := writeFiles(t, map[string]string{"p.dpdf": "name = x\n  #define A 1\n"})
	t.Setenv("PATH", t.TempDir())
	t.Setenv("GPROBES_CPP", "")
	_, err := Parse(filepath.Join(dir, "p.dpdf"), Options{})
	if err == nil || !strings.Contains(err.Error(), "p.dpdf:2:3: this file uses preprocessor directives: no C preprocessor found") {
		t.Errorf("got %v", err)
	}
}

func TestPreprocessorCommandFails(t *testing.T) {
	testkit.Need(t, "false")
	dir := writeFiles(t, map[string]string{"p.dpdf": "#define A 1\n"})
	_, err := Parse(filepath.Join(dir, "p.dpdf"), Options{CPP: "false"})
	if err == nil || !strings.Contains(err.Error(), "p.dpdf:1:1: the C preprocessor false failed") {
		t.Errorf("got %v", err)
	}
}

func TestParseNumber(t *testing.T) {
	for s, want := range map[string]uint64{"0": 0, "10": 10, "0x1F": 31, "0o17": 15, "0b11": 3, "18446744073709551615": 1<<64 - 1} {
		if v, err := ParseNumber(s); err != nil || v != want {
			t.Errorf("%s = %d, %v", s, v, err)
		}
	}
	for _, s := range []string{"010", "0x", "12a", "0xfffffffffffffffff", "0b2"} {
		if _, err := ParseNumber(s); err == nil {
			t.Errorf("%s: no error", s)
		}
	}
}

// FuzzParse: the parser never panics, every error it reports is
// positioned in the input, and the fast path builds the whole grammar's
// tree for every statement (or fails where it fails).
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"name = x\nmodtype = user\noffset = 1\npush d,1\nexit\n",
		"name = \"/lib/libc.so.6\"\noffset = fs/open.c:12\nl: jz l\n",
		"/* x */ push r,rax ; log str // y\n",
		"offset = a.b+(sizeof(struct x)*offsetof(union y, z[3].w))\n",
		"x: y: z:\n'\\x41' \"s\" <<>> ~",
		// hostile: nesting past MaxNesting, a byte order mark, escapes
		"offset = 1\npush d," + strings.Repeat("(", 2*MaxNesting) + "1" + strings.Repeat(")", 2*MaxNesting) + "\n",
		"offset = 1\nexit " + strings.Repeat("-~", MaxNesting) + "1\nl: push d,1" + strings.Repeat("+1", 2*MaxNesting) + "\n",
		"\ufeffname = x\noffset = 1\n\ufeffpush r,\x1b[31mrax\xff\n",
		// probe kinds
		"name = vmlinux\nmodtype = kernel\ntracepoint = sched:sched_switch // c\npush field,prev_pid ; log 1\nretprobe = f\nmax active = 8\nexit\n",
		"tracepoint = a:b:c d /* x */ ; tracepoint = :\nretprobe = a.c:1\npush field,\npush field,x.y\n",
		// watch, switching, instance variables
		"watch = a + offsetof(struct s, f[1]),8,rw ; enabled = NO\nenable 3\ndisable (1,2)\npush iv,0\npop iv,7\n",
		"watch = ,,\nwatch = ((a,b),1,w\nwatch = a.c:1,4,w,\nwatch = a),1,w\nenable\npush iv\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		compareFastPath(t, string(data))
		file, err := ParseSource("fuzz.dpdf", data, Options{NoPreprocessor: true})
		if err == nil {
			return
		}
		l, ok := err.(ErrorList)
		if !ok {
			t.Fatalf("error of type %T: %v", err, err)
		}
		if file == nil {
			t.Fatal("no File returned with syntax errors")
		}
		for _, e := range l {
			if e.Pos.Filename != "fuzz.dpdf" || e.Pos.Line < 1 || e.Pos.Column < 1 {
				t.Fatalf("unpositioned error %q at %+v", e.Msg, e.Pos)
			}
		}
	})
}

// TestFastPathMatchesGrammar: the dispatching fast path builds exactly the
// AST the whole Stmt grammar builds, for every statement of the VM
// semantics table, the examples and the docs.
func TestFastPathMatchesGrammar(t *testing.T) {
	var srcs []string
	for _, glob := range []string{"../rpn/testdata/vm.txt", "../testdata/examples/*.dpdf", "../docs/language.md"} {
		files, _ := filepath.Glob(glob)
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			srcs = append(srcs, string(b))
		}
	}
	if len(srcs) < 3 {
		t.Fatal("test sources missing")
	}
	// each form the fast path builds itself, and near misses the
	// grammar decides
	srcs = append(srcs, `offset = func_1+0x10
offset = a | b << 3 ^ 'c' % 2
offset = a +
offset = a + + 1
offset = -a
major = (1)
minor = 1 2
watch = a+1,8,w
push d,a - 1 * b
push d,a - -1
push d,sizeof(int)+1
push d,1+offsetof(struct a,b)
push d,1+
push pid ; push TID ; push procid ; push task ; push ts ; push lp ; push Mrf ; push mrf,8 ; push mrf,(8) ; push mrf,
push lv ; push gv,3 ; push iv,1 ; push field,x
pop lp ; pop mrf ; pop mrf,8 ; pop r,rax ; pop U,rsp ; pop r,1 ; pop lv ; pop gv,2 ; pop lv,(2) ; pop lv, ; pop iv,1 ; pop io,1 ; pop
log str ; log MRF ; log 2 ; log x ; log lv ; log lv,1,2 ; log gv,0,n ; log str,1 ; log (2) ; log
inc lv ; inc gv,1 ; dec lv,(1) ; move gv, ; inc lv,1,2 ; inc x
jmp l ; jz 1 ; loop a b ; call ; l: jmp l
`)
	n := 0
	for _, src := range srcs {
		n += compareFastPath(t, src)
	}
	if n < 200 {
		t.Errorf("only %d statements compared", n)
	}
}

// compareFastPath checks that the fast path and the whole grammar agree on
// every statement of src: both fail, or both build the same tree. It
// returns how many trees it compared.
func compareFastPath(t *testing.T, src string) int {
	t.Helper()
	n := 0
	var errs ErrorList
	toks := newScanner("x", src, false, &errs).scan()
	start := 0
	for i, tok := range toks {
		if tok.Type != tokEOL {
			continue
		}
		line := toks[start : i+1]
		start = i + 1
		if _, ok := checkNesting(line); !ok {
			continue // refused before either parser runs
		}
		bad := false
		for _, t := range line {
			bad = bad || t.Type == tokBad
		}
		if bad {
			continue
		}
		fast, ok := fastStatement(line)
		eof := lexer.Token{Type: tokEOF, Pos: tok.Pos}
		pl, _ := lexer.Upgrade(&sliceLexer{toks: append(line[:len(line):len(line)], eof)})
		full, err := stmtParser.ParseFromLexer(pl)
		if ok != (err == nil) {
			t.Errorf("%s: fast path ok=%v, grammar error %v", line[0].Pos, ok, err)
			continue
		}
		if !ok {
			continue
		}
		n++
		if !reflect.DeepEqual(fast, full) {
			t.Errorf("%s: fast path AST differs:\n%#v\n%#v", line[0].Pos, fast, full)
		}
	}
	return n
}

// TestProbeKindsParse: retprobe and tracepoint start probes as offset does;
// a tracepoint's value is its SUBSYS:EVENT token as written, a retprobe's
// an expression, and push field keeps the case of its name.
func TestProbeKindsParse(t *testing.T) {
	f := parseString(t, `name = vmlinux
modtype = kernel
tracepoint = sched:sched_switch   // a comment
minor = 1
push field,Prev_Pid
exit 1
Ret Probe = do_sys_open+0
max_active = 8
exit
retprobe = fs/open.c:12
tracepoint = bad name:x ; exit
`)
	if len(f.Probes) != 4 {
		t.Fatalf("%d probes", len(f.Probes))
	}
	tp := f.Probes[0]
	if tp.Offset.Norm() != "tracepoint" || tp.Offset.Value.Event == nil || *tp.Offset.Value.Event != "sched:sched_switch" || tp.Offset.Value.Text != "sched:sched_switch" {
		t.Errorf("tracepoint value %+v", tp.Offset.Value)
	}
	if p := tp.Body[0].Instr.Push; p == nil || p.Field == nil || p.Field.Value != "Prev_Pid" || p.Field.Pos.Column != 12 || p.Pos.Column != 6 {
		t.Errorf("push field: %+v", tp.Body[0].Instr.Push)
	}
	rp := f.Probes[1]
	if rp.Offset.Norm() != "retprobe" || rp.Offset.Value.Expr == nil || rp.Offset.Value.Text != "do_sys_open+0" || len(rp.Keys) != 1 || rp.Keys[0].Norm() != "maxactive" {
		t.Errorf("retprobe %+v keys %d", rp.Offset.Value, len(rp.Keys))
	}
	if v := f.Probes[2].Offset.Value; v.Line == nil || *v.Line != "fs/open.c:12" {
		t.Errorf("retprobe on a source line lexed as %+v (the compiler refuses it by that)", v)
	}
	if v := f.Probes[3].Offset.Value; v.Event == nil || *v.Event != "bad name:x" || len(f.Probes[3].Body) != 1 {
		t.Errorf("a bad tracepoint is one token for the compiler to explain, up to ';': %+v", v)
	}
}

// TestWatchAndSwitchingParse: watch starts a probe; its value's parts are
// split at the commas outside parentheses (offsetof's stays inside the
// expression), Head is the address as written; enabled is a probe
// keyword; enable and disable take a minor; push iv and pop iv an index.
func TestWatchAndSwitchingParse(t *testing.T) {
	f := parseString(t, `name = vmlinux
modtype = kernel
watch = jiffies , 8,W   // a comment
enabled = no
enable 3
DISABLE 0x10 + 1
watch = init_task + offsetof(struct task_struct, pid),4,rw
push iv,7
pop IV , 2
log 1
offset = f
minor = 1
minor2: enable minor
watch = fs/a.c:12,1,w
`)
	if len(f.Probes) != 4 {
		t.Fatalf("%d probes", len(f.Probes))
	}
	w := f.Probes[0]
	v := w.Offset.Value
	if w.Offset.Norm() != "watch" || v.Expr == nil || len(v.Args) != 2 || v.Head != "jiffies" || v.Text != "jiffies , 8,W" {
		t.Fatalf("watch value %+v (head %q, text %q)", v, v.Head, v.Text)
	}
	if v.Args[0].Text() != "8" || v.Args[0].Pos.Column != 19 || v.Args[1].Text() != "W" || v.Args[1].Pos.Column != 21 {
		t.Errorf("watch parts %q at %d, %q at %d", v.Args[0].Text(), v.Args[0].Pos.Column, v.Args[1].Text(), v.Args[1].Pos.Column)
	}
	if len(w.Keys) != 1 || w.Keys[0].Norm() != "enabled" {
		t.Errorf("keys %+v", w.Keys)
	}
	if in := w.Body[0].Instr; in.Switch != "enable" || in.Minor.Text() != "3" {
		t.Errorf("enable: %+v", in)
	}
	if in := w.Body[1].Instr; in.Switch != "DISABLE" || in.Minor.Text() != "0x10 + 1" {
		t.Errorf("disable: %+v", in)
	}
	v = f.Probes[1].Offset.Value
	if len(v.Args) != 2 || v.Head != "init_task + offsetof(struct task_struct, pid)" || v.Args[1].Text() != "rw" {
		t.Errorf("watch with offsetof: head %q, %d args", v.Head, len(v.Args))
	}
	body := f.Probes[1].Body
	if p := body[0].Instr.Push; p == nil || p.IV == nil || p.IV.Text() != "7" {
		t.Errorf("push iv: %+v", body[0].Instr.Push)
	}
	if p := body[1].Instr.Pop; p == nil || p.IV == nil || p.IV.Text() != "2" {
		t.Errorf("pop iv: %+v", body[1].Instr.Pop)
	}
	// enable's operand is an expression: a symbol named like a keyword
	// is the compiler's to refuse
	if in := f.Probes[2].Body[0].Instr; in.Switch != "enable" || in.Minor.Text() != "minor" || f.Probes[2].Body[0].Label.Name != "minor2" {
		t.Errorf("label and enable: %+v", f.Probes[2].Body[0])
	}
	// a source line is lexed as offset's, for the compiler to refuse
	if v := f.Probes[3].Offset.Value; v.Line == nil || *v.Line != "fs/a.c:12" || len(v.Args) != 2 || v.Head != "fs/a.c:12" {
		t.Errorf("watch on a source line: %+v", v)
	}
	// commas elsewhere are not parts: a parenthesised comma is a syntax
	// error, and so is a comma list in another keyword's value
	_, err := ParseSource("t.dpdf", []byte("name = x\nmodtype = user\nwatch = (a,b),1\nminor = 1,2\noffset = main\npush iv\nenable\n"), Options{NoPreprocessor: true})
	var b strings.Builder
	PrintError(&b, err, false)
	for _, want := range []string{
		`t.dpdf:3:11: unexpected ",": watch takes ADDRESS,LEN,MODE, such as jiffies,8,w`,
		`t.dpdf:4:10: unexpected "," after a complete statement`,
		`t.dpdf:6:8: unexpected end of statement: expected push r,REG | u,REG | d,EXPR | lv[,I] | gv[,I] | iv,I |`,
		`t.dpdf:7:7: unexpected end of statement: expected enable MINOR`,
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("errors lack %q:\n%s", want, b.String())
		}
	}
}
