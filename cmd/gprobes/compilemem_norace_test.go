//go:build !race

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Checking a DPDF takes memory proportional to its program with a small
// constant: a 300,000-instruction file (4 MB) is checked in under 256 MB
// of peak resident memory. A statement's syntax tree used to live until
// the whole file was compiled: about 2.7 KB an instruction, 800 MB here.
// Not built with -race: the race detector multiplies memory several
// times, and the bound is for the product build.
func TestCheckMemoryProportional(t *testing.T) {
	const probes, perProbe = 15000, 20
	path := filepath.Join(t.TempDir(), "big.dpdf")
	generatedDPDF(t, path, probes)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "check", path)
	cmd.Env = append(os.Environ(), "GPROBES_TEST_PEAKRSS=1")
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("gprobes check: %v\n%s%s", err, out.String(), errb.String())
	}
	if want := fmt.Sprintf("%d probes", probes); !strings.Contains(out.String(), want) {
		t.Fatalf("gprobes check did not say %q:\n%s", want, out.String())
	}
	m := regexp.MustCompile(`peak RSS: (\d+) KiB`).FindStringSubmatch(errb.String())
	if m == nil {
		t.Fatalf("no peak RSS reported:\n%s", errb.String())
	}
	kib, _ := strconv.ParseInt(m[1], 10, 64)
	fi, _ := os.Stat(path)
	insns := probes * perProbe
	t.Logf("%d instructions (%d bytes of DPDF): peak RSS %d MiB, %d bytes an instruction", insns, fi.Size(), kib>>10, kib*1024/int64(insns))
	if kib<<10 >= 256<<20 {
		t.Errorf("checking %d instructions took %d MiB of peak resident memory, want < 256 MiB", insns, kib>>10)
	}
}
