//go:build linux

package main

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/daemon"
	"github.com/gprobes/gprobes/lab/qemulab"
)

// TestKernelLabAbilities: gprobes doctor in the QEMU lab's guest (Debian
// 6.1), and what it says checked by doing it there: an entry probe goes
// in as fentry where doctor says fentry, else as a kprobe; watch probes
// count exactly where doctor says kernel_watch, else are refused with
// doctor's reason, word for word. The watches: the followed process's
// own name ("task" plus BTF's offsetof comm), renamed 100 times by a
// shell writing /proc/$$/comm (each record the byte written, the
// shell's pid, in order), and jiffies_64 by name (kallsyms' in the
// guest) while a shell loop runs (each record a later jiffies). The
// names are 8 bytes long: a shorter one is seen twice under TCG
// (docs/kernel.md, "Watch probes").
//
// Then the host tests of the abilities, bpf's and kernel's test binaries
// (go test -c) run as root in the guest: where this machine asserts the
// refusals, there they exercise kprobes, kretprobes, fentry and (where
// doctor says kernel_watch) watches for real, with exact counts, each
// test checking the detection against the kernel's own answer.
func TestKernelLabAbilities(t *testing.T) {
	qemulab.Require(t) // before the builds
	dir := t.TempDir()
	var bins []qemulab.File
	for _, pkg := range []string{"bpf", "kernel"} {
		bin := filepath.Join(dir, pkg+".test")
		cmd := exec.Command("go", "test", "-c", "-trimpath", "-o", bin, "github.com/gprobes/gprobes/"+pkg)
		cmd.Dir = qemulab.SourceDir()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go test -c %s: %v\n%s", pkg, err, out)
		}
		bins = append(bins, qemulab.File{Guest: "/bin/" + pkg + ".test", Host: bin})
	}
	vm := bootKernelLab(t, bins...)
	out := mustGuest(t, vm, "gprobes doctor --json")
	var r bpf.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	t.Logf("gprobes doctor in the guest:\n%s", mustGuest(t, vm, "gprobes doctor"))
	ab := map[string]bpf.Ability{}
	for _, a := range r.Abilities {
		ab[a.Name] = a
	}
	// what the lab's kernel has: TestKernelLab uses each for real
	for _, n := range []string{"ebpf", "tracepoint", "kprobe", "kretprobe", "ringbuf", "bpf_loop", "task_pt_regs", "btf", "kallsyms_addresses", "kallsyms_data"} {
		if !ab[n].OK {
			t.Errorf("the guest's %s: %+v", n, ab[n])
		}
	}

	t.Run("entry", func(t *testing.T) {
		k := runKernel(t, vm, "/root/kernel/getppid_entry.dpdf", "gpwork counts 10")
		how := "fentry"
		if !ab["fentry"].OK {
			how = "kprobe"
		}
		k.probe(t, 1, how, "active", 10)
	})

	// run runs a watch DPDF with a shell command in the guest; its
	// records and the summary's row of minor 1
	run := func(t *testing.T, file, script string) (recs []daemon.LogLine, row map[string]string, shell int, out string) {
		t.Helper()
		out, rc := guest(t, vm, "gprobes run --target kernel --json "+file+" -- sh -c '"+script+"'")
		if rc != 0 {
			t.Fatalf("status %d:\n%s", rc, out)
		}
		if m := regexp.MustCompile(`(?m)^SHPID (\d+)$`).FindStringSubmatch(out); m != nil {
			shell, _ = strconv.Atoi(m[1])
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "{") {
				var rec daemon.LogLine
				if err := json.Unmarshal([]byte(l), &rec); err != nil {
					t.Fatalf("%v: %s", err, l)
				}
				recs = append(recs, rec)
			}
		}
		return recs, tableRows(out)[1], shell, out
	}
	refused := func(t *testing.T, row map[string]string, out string) {
		t.Helper()
		want := ab["kernel_watch"].Why
		if row["STATE"] != "refused" || !strings.Contains(out, want+"; gprobes has no other way to watch the kernel's memory\n") {
			t.Errorf("doctor says kernel_watch: %s; the run:\n%s", want, out)
		}
	}

	t.Run("comm", func(t *testing.T) {
		letters := strings.Fields("a b c d e f g h i j k l m n o p q r s t u v w x y")
		recs, row, shell, out := run(t, "/root/kernel/comm_watch.dpdf",
			"echo SHPID $$; for r in 1 2 3 4; do for c in "+strings.Join(letters, " ")+"; do echo ${c}gpcomm$r > /proc/$$/comm; done; done")
		t.Logf("%s", tableOf(out))
		if !ab["kernel_watch"].OK {
			refused(t, row, out)
			return
		}
		const n = 100
		if row["STATE"] != "active" || row["HOW"] != "watch" || row["HITS"] != strconv.Itoa(n) || len(recs) != n {
			t.Fatalf("%d records, row %v; want %d hits, active, watch:\n%s", len(recs), row, n, out)
		}
		for i, rec := range recs {
			d, _ := hex.DecodeString(rec.Data)
			if len(d) != 16 || d[0] != letters[i%len(letters)][0] || binary.LittleEndian.Uint64(d[8:]) != uint64(shell) || rec.Pid != shell {
				t.Fatalf("record %d: %+v, want %q by the shell %d", i, rec, letters[i%len(letters)], shell)
			}
		}
	})

	for _, c := range []struct{ pkg, tests string }{
		{"bpf", "TestAbilities TestScanKallsyms TestMechanisms TestKprobe TestKretprobe TestFentry TestWatch"},
		{"kernel", "TestFunctionProbes TestWatch TestWatchTask TestWatchSymbols"},
	} {
		t.Run(c.pkg+".test", func(t *testing.T) {
			tests := strings.Fields(c.tests)
			out, rc := guest(t, vm, "cd /tmp && "+c.pkg+".test -test.v -test.run '^("+strings.Join(tests, "|")+")$'")
			t.Logf("%s.test in the guest:\n%s", c.pkg, out)
			if rc != 0 {
				t.Fatalf("%s.test: status %d", c.pkg, rc)
			}
			for _, name := range tests {
				if !strings.Contains(out, "--- PASS: "+name+" (") {
					t.Errorf("%s did not pass", name)
				}
			}
		})
	}

	t.Run("jiffies", func(t *testing.T) {
		recs, row, _, out := run(t, "/root/kernel/jiffies_watch.dpdf", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done")
		t.Logf("%d records\n%s", len(recs), tableOf(out))
		if !ab["kernel_watch"].OK {
			refused(t, row, out)
			return
		}
		if row["STATE"] != "active" || row["HITS"] != strconv.Itoa(len(recs)) || len(recs) == 0 {
			t.Fatalf("%d records, row %v; want as many hits as records, and some:\n%s", len(recs), row, out)
		}
		var last uint64
		for i, rec := range recs {
			w := recordWords(rec)
			if len(w) != 1 || w[0] <= last {
				t.Fatalf("record %d: %v after %d: want a later jiffies", i, w, last)
			}
			last = w[0]
		}
		t.Logf("jiffies_64 from %d to %d", recordWords(recs[0])[0], last)
	})
}
