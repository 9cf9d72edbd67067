//go:build linux

package bpf_test

import (
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/gprobes/gprobes/bpf"
	dpdfc "github.com/gprobes/gprobes/compiler" // bpf has a type compiler
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/rpn"
)

// needBPF skips the test (fails it under CI=true) when this kernel or
// process cannot run the programs.
func needBPF(t testing.TB) {
	t.Helper()
	if err := bpf.Available(); err != nil {
		testkit.SkipOrFail(t, "%v", err)
	}
}

var headerKeys = map[string]bool{"name": true, "modtype": true, "major": true, "jmpmax": true,
	"logmax": true, "dfltexit": true, "vars": true, "gvars": true, "arch": true}

// compileSrc builds a one-probe program from DPDF text: header keywords,
// probe keywords and code, in any order; name (vmlinux), modtype (kernel)
// and offset are added when missing.
func compileSrc(t testing.TB, src string) *rpn.Program {
	t.Helper()
	var hdr, body []string
	hasName, hasType := false, false
	for _, l := range strings.Split(src, "\n") {
		k := strings.ToLower(strings.TrimSpace(strings.SplitN(l, "=", 2)[0]))
		if strings.Contains(l, "=") && headerKeys[k] {
			hasName = hasName || k == "name"
			hasType = hasType || k == "modtype"
			hdr = append(hdr, l)
		} else {
			body = append(body, l)
		}
	}
	if !hasName {
		hdr = append(hdr, "name = vmlinux")
	}
	if !hasType {
		hdr = append(hdr, "modtype = kernel")
	}
	text := strings.Join(hdr, "\n") + "\noffset = 0x1000\n" + strings.Join(body, "\n") + "\n"
	f, err := dpdf.ParseSource("test.dpdf", []byte(text), dpdf.Options{NoPreprocessor: true})
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	p, err := dpdfc.CompileProgram(f, rpn.CompileOptions{})
	if err != nil {
		var b strings.Builder
		dpdf.PrintError(&b, err, false)
		t.Fatalf("%s\n%s", b.String(), text)
	}
	return p
}

// load compiles probe 0 of p with new maps and loads it.
func load(t testing.TB, p *rpn.Program, o bpf.Options) (*ebpf.Program, *bpf.Maps, *bpf.Compiled) {
	t.Helper()
	if o.Maps == nil {
		m, err := bpf.NewMaps(p.Module(), bpf.MapOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		o.Maps = m
	}
	c, err := bpf.CompileProbe(p, 0, o)
	if err != nil {
		t.Fatalf("compile: %v\n%s", err, p.Listing(0))
	}
	prog, err := c.Load()
	if err != nil {
		t.Fatalf("load: %v\n%s\n%+v", err, p.Listing(0), err.(interface{ Unwrap() error }).Unwrap())
	}
	t.Cleanup(func() { prog.Close() })
	return prog, o.Maps, c
}
