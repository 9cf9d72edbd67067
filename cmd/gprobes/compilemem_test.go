package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// peakRSSMain is the test binary run with GPROBES_TEST_PEAKRSS=1: it runs
// gprobes (itself, with GPROBES_TEST_MAIN=1) on its arguments and prints
// the child's peak resident set on its last line of standard error. The
// measurement needs this launcher: a child started by a large process
// inherits that process's peak in its ru_maxrss (Go starts children with
// clone(CLONE_VM|CLONE_VFORK), and exec(2) folds the shared memory's peak
// into the child's), so the test process, which may have grown large,
// must not be the parent. The launcher is small when it starts gprobes.
func peakRSSMain() int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Env = append(os.Environ(), "GPROBES_TEST_MAIN=1", "GPROBES_TEST_PEAKRSS=")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	err = cmd.Run()
	code := 0
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		fmt.Fprintln(os.Stderr, "no rusage")
		return 2
	}
	fmt.Fprintf(os.Stderr, "peak RSS: %d KiB\n", ru.Maxrss) // Linux gives it in KiB
	return code
}

// generatedDPDF writes a DPDF of probes*20 instructions: each probe has
// four keyword lines and the program of the compiler benchmark (labels, a
// loop, a string log, a conditional exit).
func generatedDPDF(t *testing.T, path string, probes int) {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	w.WriteString("// generated\nname = vmlinux\nmodtype = kernel\nmajor = 3\nvars = 8\ngvars = 2\nlogmax = 512\n")
	for i := 0; i < probes; i++ {
		fmt.Fprintf(w, "\noffset = func_%d+0x%x\nminor = %d\npass count = 2\nmax hits = 1000\n", i, i%64, i%65536)
		w.WriteString("inc lv,1\npush r,rdi\npush d,0x1000\nsub\njlt small\npop\npush d,255\npush r,rsi\nlog str\nnop\n")
		w.WriteString("push d,4\nagain: inc gv,0\nloop again\npush r,rdx ; push r,rcx ; log 2\nexit 1\nsmall: push lp ; pop lp ; exit 0\n")
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
