package compiler_test

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/compiler"
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/rpn"
)

// GenerateDPDF writes a DPDF with n probes, each a realistic program:
// keywords, a label, a loop, a string log and a conditional exit.
func generateDPDF(n int) string {
	var b strings.Builder
	b.WriteString("// generated\nname = vmlinux\nmodtype = kernel\nmajor = 3\nvars = 8\ngvars = 2\nlogmax = 512\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "\noffset = func_%d+0x%x\nminor = %d\npass count = 2\nmax hits = 1000\n", i, i%64, i%65536)
		b.WriteString("inc lv,1\npush r,rdi\npush d,0x1000\nsub\njlt small\npop\npush d,255\npush r,rsi\nlog str\n")
		b.WriteString("push d,4\nagain: inc gv,0\nloop again\npush r,rdx ; push r,rcx ; log 2\nexit 1\nsmall: push lp ; pop lp ; exit 0\n")
	}
	return b.String()
}

var genPath = flag.String("gen", "", "TestGenerated1000Compiles also writes the 1,000-probe DPDF of BenchmarkCompile1000 to this file")

// TestGenerated1000Compiles: the benchmark's generated DPDF compiles to
// 1,000 probes. With -gen FILE it also writes it there, for timing the
// CLI (scripts/bench).
func TestGenerated1000Compiles(t *testing.T) {
	src := generateDPDF(1000)
	if *genPath != "" {
		if err := os.WriteFile(*genPath, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := dpdf.ParseSource("gen.dpdf", []byte(src), dpdf.Options{NoPreprocessor: true})
	if err != nil {
		t.Fatal(err)
	}
	m, err := compiler.Compile(f, rpn.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Probes) != 1000 {
		t.Fatalf("%d probes", len(m.Probes))
	}
}

// BenchmarkCompile1000 measures check (parse, compile, verify) of a
// 1,000-probe DPDF.
func BenchmarkCompile1000(b *testing.B) {
	src := []byte(generateDPDF(1000))
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		f, err := dpdf.ParseSource("gen.dpdf", src, dpdf.Options{NoPreprocessor: true})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := compiler.Compile(f, rpn.CompileOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
