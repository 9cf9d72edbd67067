//go:build linux

package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/btf"
	"golang.org/x/arch/x86/x86asm"

	"github.com/gprobes/gprobes/daemon"
	"github.com/gprobes/gprobes/lab/labkit"
	"github.com/gprobes/gprobes/lab/qemulab"
)

// The kernel target's function probes (offset, retprobe, kernel modules)
// for real, in the QEMU lab's guest: Debian's 6.1 kernel has kprobes and
// fentry where this machine's kernel has neither (docs/kernel.md,
// docs/qemu-lab.md). A static gprobes built from this tree runs inside
// the guest, with testdata/kernel's DPDFs, and gpwork's exact counts are
// the reference.

const kernelLabData = "../../testdata/kernel"

// kernelLabFiles are the files a kernel-lab guest gets: a static gprobes,
// gpprogs (counts the eBPF programs named gp_*: the guest has no bpftool)
// and testdata/kernel's DPDFs under /root/kernel, then extra (which may
// replace one of those).
func kernelLabFiles(t testing.TB, extra ...qemulab.File) []qemulab.File {
	t.Helper()
	dir := t.TempDir()
	t0 := time.Now()
	var files []qemulab.File
	for _, b := range []struct{ pkg, name string }{
		{"github.com/gprobes/gprobes/cmd/gprobes", "gprobes"},
		{"github.com/gprobes/gprobes/testdata/kernel/gpprogs", "gpprogs"},
	} {
		bin := filepath.Join(dir, b.name)
		if err := qemulab.BuildStatic(b.pkg, bin); err != nil {
			t.Fatal(err)
		}
		files = append(files, qemulab.File{Guest: "/bin/" + b.name, Host: bin})
	}
	t.Logf("static gprobes and gpprogs built in %v", time.Since(t0).Round(time.Millisecond))
	dpdfs, _ := filepath.Glob(filepath.Join(kernelLabData, "*.dpdf"))
	replaced := map[string]bool{}
	for _, f := range extra {
		replaced[f.Guest] = true
	}
	for _, p := range dpdfs {
		if g := "/root/kernel/" + filepath.Base(p); !replaced[g] {
			files = append(files, qemulab.File{Guest: g, Host: p})
		}
	}
	return append(files, extra...)
}

// bootKernelLab boots the lab guest with kernelLabFiles; the test fails if
// the guest's kernel complained (an oops, a WARN, a BUG) by its end.
func bootKernelLab(t testing.TB, extra ...qemulab.File) *qemulab.VM {
	t.Helper()
	qemulab.Require(t)
	files := kernelLabFiles(t, extra...)
	vm, err := qemulab.Boot(t.Context(), qemulab.Options{Files: files})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("guest %s booted in %v", vm.KernelRelease(), vm.BootTime().Round(time.Millisecond))
	t.Cleanup(func() {
		if e := vm.KernelErrors(); len(e) > 0 {
			t.Errorf("the guest's kernel complained:\n%s", strings.Join(e, "\n"))
		}
		vm.Kill()
	})
	return vm
}

// guest runs cmd in the guest and returns its output (stdout and stderr)
// and status.
func guest(t testing.TB, vm *qemulab.VM, cmd string) (string, int) {
	t.Helper()
	out, rc, err := vm.Run(cmd, 5*time.Minute)
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, vm.LogTail(4000))
	}
	return out, rc
}

// mustGuest is guest for commands that must succeed.
func mustGuest(t testing.TB, vm *qemulab.VM, cmd string) string {
	t.Helper()
	out, rc := guest(t, vm, cmd)
	if rc != 0 {
		t.Fatalf("%s: status %d\n%s", cmd, rc, out)
	}
	return out
}

var (
	gpworkPidRe = regexp.MustCompile(`(?m)^GPWORK pid (\d+)$`)
	gppidRe     = regexp.MustCompile(`(?m)^GPPID (\d+)$`)
)

// kernelRun is one `gprobes run --target kernel --json FILE -- gpwork ...`
// in the guest, as read from its output.
type kernelRun struct {
	out     string
	rc      int
	gprobes int // gprobes' pid: gpwork's parent, getppid's answer
	gpwork  int // the workload's pid
	records []daemon.LogLine
	rows    map[uint16]map[string]string // the summary's probe table by minor
	lv      []uint64
}

// runKernel runs `gprobes run --target kernel --json FILE -- WORK` in the
// guest. The shell execs gprobes after printing its own pid, which is
// then gprobes': gpwork's parent.
func runKernel(t *testing.T, vm *qemulab.VM, file, work string) *kernelRun {
	t.Helper()
	r := &kernelRun{}
	r.out, r.rc = guest(t, vm, "echo GPPID $$; exec gprobes run --target kernel --json "+file+" -- "+work)
	show := r.out
	if len(show) > 3000 {
		show = show[:1500] + "\n...\n" + show[len(show)-1500:]
	}
	if r.rc != 0 {
		t.Fatalf("gprobes run %s -- %s: status %d\n%s", file, work, r.rc, show)
	}
	m, w := gppidRe.FindStringSubmatch(r.out), gpworkPidRe.FindStringSubmatch(r.out)
	if m == nil || w == nil {
		t.Fatalf("no pids in:\n%s", show)
	}
	r.gprobes, _ = strconv.Atoi(m[1])
	r.gpwork, _ = strconv.Atoi(w[1])
	for _, l := range strings.Split(r.out, "\n") {
		if !strings.HasPrefix(l, "{") {
			continue
		}
		var rec daemon.LogLine
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		r.records = append(r.records, rec)
	}
	r.rows = tableRows(r.out)
	if lv := regexp.MustCompile(`(?m) vmlinux: lv (.*)$`).FindStringSubmatch(r.out); lv != nil {
		for _, f := range strings.Fields(lv[1]) {
			_, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseUint(v, 10, 64)
			r.lv = append(r.lv, n)
		}
	}
	t.Logf("gprobes run %s -- %s: gprobes pid %d, gpwork pid %d, %d records, lv %v\n%s", file, work, r.gprobes, r.gpwork, len(r.records), r.lv, tableOf(r.out))
	return r
}

// tableRows reads the probe table run prints at its end, per minor, by
// the columns of its header (tabwriter's: a location may hold a space,
// "retprobe __x64_sys_getppid").
func tableRows(out string) map[uint16]map[string]string {
	rows := map[uint16]map[string]string{}
	var cols []string
	var starts []int
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "TARGET ") {
			cols, starts = strings.Fields(l), nil
			for _, c := range cols {
				starts = append(starts, strings.Index(l, c))
			}
			continue
		}
		if cols == nil || len(l) < starts[len(starts)-1] {
			continue
		}
		row := map[string]string{}
		for i, c := range cols {
			end := len(l)
			if i+1 < len(starts) {
				end = starts[i+1]
			}
			row[c] = strings.TrimSpace(l[starts[i]:end])
		}
		if m, err := strconv.ParseUint(row["MINOR"], 10, 16); err == nil {
			rows[uint16(m)] = row
		}
	}
	return rows
}

// tableOf is the probe table at the end of run's output.
func tableOf(out string) string {
	if i := strings.Index(out, "TARGET "); i >= 0 {
		return out[i:]
	}
	return ""
}

// probe checks a probe of the summary: its HOW, state and hits.
func (r *kernelRun) probe(t *testing.T, minor uint16, how, state string, hits int) {
	t.Helper()
	row := r.rows[minor]
	if row == nil {
		t.Errorf("no probe of minor %d in the summary", minor)
		return
	}
	if row["HOW"] != how || row["STATE"] != state || row["HITS"] != strconv.Itoa(hits) || row["FAULTS"] != "0" || row["MISSED"] != "0" {
		t.Errorf("minor %d: state %s, how %s, hits %s, faults %s, missed %s; want %s, %s, %d hits, no faults or misses",
			minor, row["STATE"], row["HOW"], row["HITS"], row["FAULTS"], row["MISSED"], state, how, hits)
	}
}

// words checks each record: minor, the workload's pid, and one logged
// word, which check is given.
func (r *kernelRun) words(t *testing.T, n int, check func(v uint64) bool) {
	t.Helper()
	if len(r.records) != n {
		t.Errorf("%d records, want %d", len(r.records), n)
	}
	bad := 0
	for _, rec := range r.records {
		d, err := hex.DecodeString(rec.Data)
		if rec.Kind != "log" || rec.Minor != 1 || rec.Pid != r.gpwork || rec.Tid != r.gpwork || err != nil || len(d) != 8 || !check(binary.LittleEndian.Uint64(d)) {
			if bad++; bad <= 5 {
				t.Errorf("record %+v", rec)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d records wrong", bad, len(r.records))
	}
}

// getppidBoundary decodes __x64_sys_getppid in the lab's vmlinux (the
// kernel the guest runs, at its link-time address: the lab boots without
// KASLR) and returns the first instruction past the entry's 5 bytes
// (ftrace's call site) that is at least 3 bytes long and neither a call
// nor a jump: its offset, length and text as gprobes names it.
func getppidBoundary(t *testing.T) (off, n int, text string) {
	t.Helper()
	dir, err := qemulab.Artifacts()
	if err != nil {
		t.Fatal(err)
	}
	addr, err := qemulab.Symbol("__x64_sys_getppid")
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(filepath.Join(dir, "vmlinux"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	text0 := f.Section(".text")
	code := make([]byte, 64)
	if _, err := text0.ReadAt(code, int64(addr-text0.Addr)); err != nil {
		t.Fatal(err)
	}
	for at := 0; at < 48; {
		in, err := x86asm.Decode(code[at:], 64)
		if err != nil {
			t.Fatalf("__x64_sys_getppid+%#x: %v (% x)", at, err, code)
		}
		if at >= 5 && in.Len >= 3 && in.Op != x86asm.CALL && in.Op != x86asm.JMP {
			return at, in.Len, in.String()
		}
		at += in.Len
	}
	t.Fatalf("no instruction of 3 bytes or more in __x64_sys_getppid: % x", code)
	return
}

// TestKernelLab: gprobes run --target kernel and the daemon in the lab
// guest, on function probes (docs/kernel.md), with the exact
// counts of gpwork:
//
//   - entry: offset = __x64_sys_getppid goes in as fentry; hits, lv and
//     the records' pid are gpwork's N calls and pid;
//   - inside: a kprobe at an instruction boundary inside the function
//     counts exactly, an offset inside that instruction is refused naming
//     it, the module's other probe going in;
//   - retprobe: a kretprobe logs getppid's return, rax: gprobes' pid;
//   - rsp: a probe reading rsp at the entry, which fentry cannot give,
//     goes in as a kprobe and counts exactly;
//   - modules: name = rmd160 inserted while rmd160 is not loaded is
//     pending; modprobe puts it in, rmmod makes it pending, modprobe puts
//     it in again, and an rmmod and modprobe within one poll too; exact
//     counts of gpwork hash rmd160 N throughout; a module that does not
//     exist is refused;
//   - insert100: 100 function probes in one module (fentry where it can,
//     kprobes otherwise; then 100 kprobes): the insert's time is logged,
//     not asserted (TCG);
//   - sigkill: a daemon with every kind of probe in, killed with SIGKILL,
//     leaves no gp_* program and no enabled kprobe; the one thing left (a
//     kretprobe's tracefs event, maxactive above the kernel's default) is
//     removed by the next start of the kernel target; getppid still works.
func TestKernelLab(t *testing.T) {
	qemulab.Require(t) // before the lab's artifacts are built
	off, n, insn := getppidBoundary(t)
	t.Logf("__x64_sys_getppid+%#x: %s, %d bytes", off, insn, n)
	inside, err := os.ReadFile(filepath.Join(kernelLabData, "getppid_inside.dpdf"))
	if err != nil {
		t.Fatal(err)
	}
	dpdf := strings.Replace(string(inside), "offset = __x64_sys_getppid+0xd\n", fmt.Sprintf("offset = __x64_sys_getppid+%#x\n", off), 1)
	dpdf = strings.Replace(dpdf, "offset = __x64_sys_getppid+0xe\n", fmt.Sprintf("offset = __x64_sys_getppid+%#x\n", off+1), 1)
	otherKo := rmd160OtherBuild(t)
	many, fns := manyProbes(t, "", 100)
	manyK, _ := manyProbes(t, "push r,rsp\n", 100)
	vm := bootKernelLab(t,
		qemulab.File{Guest: "/root/kernel/getppid_inside.dpdf", Data: []byte(dpdf)},
		qemulab.File{Guest: "/root/getppid_latency.dpdf", Host: examples + "/getppid_latency.dpdf"},
		qemulab.File{Guest: "/root/rmd160-other.ko", Data: otherKo.data},
		qemulab.File{Guest: "/root/many.dpdf", Data: []byte(many)},
		qemulab.File{Guest: "/root/manyk.dpdf", Data: []byte(manyK)},
	)
	const calls = 1000
	work := fmt.Sprintf("gpwork counts %d", calls)

	t.Run("entry", func(t *testing.T) {
		r := runKernel(t, vm, "/root/kernel/getppid_entry.dpdf", work)
		r.probe(t, 1, "fentry", "active", calls)
		if !slices.Equal(r.lv, []uint64{calls}) {
			t.Errorf("lv %v, want [%d]", r.lv, calls)
		}
		r.words(t, calls, func(v uint64) bool { return v == uint64(r.gpwork) })
	})

	t.Run("inside", func(t *testing.T) {
		r := runKernel(t, vm, "/root/kernel/getppid_inside.dpdf", work)
		r.probe(t, 1, "kprobe", "active", calls)
		r.probe(t, 2, "-", "refused", 0)
		if !slices.Equal(r.lv, []uint64{calls, 0}) {
			t.Errorf("lv %v, want [%d 0]", r.lv, calls)
		}
		// decoded from the text before minor 1's kprobe went in
		why := fmt.Sprintf("__x64_sys_getppid+%#x is not an instruction boundary: the instruction at +%#x (%s) runs to +%#x", off+1, off, insn, off+n)
		if !strings.Contains(r.out, fmt.Sprintf("gprobes: probe __x64_sys_getppid+%#x (minor 2) refused: %s\n", off+1, why)) {
			t.Errorf("no refusal %q in:\n%s", why, r.out)
		}
		if row := r.rows[1]; row != nil && row["LOCATION"] != fmt.Sprintf("__x64_sys_getppid+%#x", off) {
			t.Errorf("minor 1 at %s", row["LOCATION"])
		}
	})

	t.Run("retprobe", func(t *testing.T) {
		r := runKernel(t, vm, "/root/kernel/getppid_ret.dpdf", work)
		r.probe(t, 1, "kretprobe", "active", calls)
		if !slices.Equal(r.lv, []uint64{calls}) {
			t.Errorf("lv %v, want [%d]", r.lv, calls)
		}
		// getppid returns gpwork's parent: gprobes, which started it
		r.words(t, calls, func(v uint64) bool { return v == uint64(r.gprobes) })
	})

	t.Run("rsp", func(t *testing.T) {
		r := runKernel(t, vm, "/root/kernel/getppid_rsp.dpdf", work)
		r.probe(t, 1, "kprobe", "active", calls)
		if !slices.Equal(r.lv, []uint64{calls}) {
			t.Errorf("lv %v, want [%d]", r.lv, calls)
		}
		// a kernel stack address
		r.words(t, calls, func(v uint64) bool { return v >= 0xffff800000000000 && v&7 == 0 })
	})

	t.Run("iv", func(t *testing.T) {
		// testdata/examples/getppid_latency.dpdf, as written for guests
		r := runKernel(t, vm, "/root/getppid_latency.dpdf", work)
		r.probe(t, 1, "kprobe", "active", calls)
		r.probe(t, 2, "kretprobe", "active", calls)
		if len(r.records) != calls {
			t.Errorf("%d records, want %d", len(r.records), calls)
		}
		bad := 0
		var sum uint64
		for _, rec := range r.records {
			w := recordWords(rec)
			if rec.Minor != 2 || len(w) != 3 || w[0] != uint64(r.gpwork) || w[1] != uint64(r.gprobes) || w[2] == 0 || w[2] > 1e9 {
				if bad++; bad <= 5 {
					t.Errorf("record %+v: words %v; want pid %d, return %d, 0 < ns < 1e9", rec, w, r.gpwork, r.gprobes)
				}
			}
			if len(w) == 3 {
				sum += w[2]
			}
		}
		t.Logf("getppid entry to return: %d ns a call on average in the TCG guest", sum/uint64(max(len(r.records), 1)))
	})

	// the daemon for what follows
	daemonPid := strings.TrimSpace(mustGuest(t, vm, "gprobes daemon </dev/null >/tmp/daemon.log 2>&1 & echo $!; "+daemonServing))
	t.Logf("daemon pid %s", daemonPid)

	t.Run("iv4", func(t *testing.T) {
		testKernelLabIV(t, vm)
	})

	t.Run("modules", func(t *testing.T) {
		testKernelLabModules(t, vm)
	})

	t.Run("modpack", func(t *testing.T) {
		testKernelLabModulePack(t, vm, otherKo)
	})

	t.Run("insert100", func(t *testing.T) {
		for _, c := range []struct{ file, what string }{{"/root/many.dpdf", "entries"}, {"/root/manyk.dpdf", "entries reading rsp"}} {
			// the status is looked at after: an insert that takes the
			// daemon more than a minute (a loaded host) is done, but its
			// answer cut (the daemon's write deadline runs from the
			// request's start: "Post ...: EOF")
			d := timed(t, vm, "gprobes insert --target kernel "+c.file+" >/tmp/q 2>&1; echo $? >/tmp/rc")
			if out := mustGuest(t, vm, "cat /tmp/rc /tmp/q | head -3"); !strings.HasPrefix(out, "0\n") {
				if !strings.Contains(out, ": EOF") {
					t.Fatalf("insert %s:\n%s", c.file, out)
				}
				t.Logf("insert %s took %.1f s, and the daemon cut its answer (its write deadline, a minute from the request's start):\n%s", c.file, d, out)
			}
			q := queryDaemon(t, vm)
			how := map[string]int{}
			active := 0
			for _, p := range q {
				if p.Module != "vmlinux" {
					continue
				}
				how[p.How]++
				if p.State == "active" {
					active++
				} else {
					t.Errorf("%s: %s (%s)", p.Location, p.State, p.Reason)
				}
			}
			if active != len(fns) {
				t.Errorf("%d of %d probes active", active, len(fns))
			}
			rm := timed(t, vm, "gprobes remove vmlinux")
			t.Logf("100 probes at %d functions' %s: insert %.2f s (%v), remove %.2f s, in the TCG guest", len(fns), c.what, d, how, rm)
		}
	})

	t.Run("sigkill", func(t *testing.T) {
		mustGuest(t, vm, "gprobes insert --target kernel /root/kernel/sigkill.dpdf && gpwork counts 3")
		q := queryDaemon(t, vm)
		hows := map[uint16]string{}
		others := 0 // the earlier subtests' probes still in (rmd160's, when modpack did not run)
		for _, p := range q {
			if p.Module != "vmlinux" && p.State == "active" {
				others++
			}
			if p.Module == "vmlinux" {
				hows[p.Minor] = p.How
				// system-wide: gpwork's 3 calls, and the one of the
				// shell the query's command runs in (busybox sh sets
				// $PPID as it starts)
				if p.State != "active" || p.Hits != 4 {
					t.Errorf("minor %d %s: %s, %d hits, want active and 4", p.Minor, p.Location, p.State, p.Hits)
				}
			}
		}
		if want := map[uint16]string{1: "fentry", 2: "kprobe", 3: "kretprobe", 4: "kretprobe", 5: "tracepoint"}; !sameMap(hows, want) {
			t.Errorf("mechanisms %v, want %v", hows, want)
		}
		before := mustGuest(t, vm, "gpprogs; cat /sys/kernel/debug/kprobes/list; cat /sys/kernel/tracing/kprobe_events")
		t.Logf("with the daemon:\n%s", before)
		if want := fmt.Sprintf("gpprogs gp_ %d\n", 5+others+1); !strings.Contains(before, want) { // 5 probes, the others, and kmem's
			t.Errorf("want %q:\n%s", want, before)
		}
		mustGuest(t, vm, "kill -9 "+daemonPid+"; "+labkit.Wait{What: "the daemon to die", Cond: "! kill -0 " + daemonPid, Show: "ps"}.Cmd())
		// (the kernel frees them as it closes the dead daemon's files;
		// the wait's failure, if any, is the start of what is checked)
		after := mustGuest(t, vm, labkit.Wait{What: "the kernel to free the dead daemon's programs", Cond: "gpprogs | grep -q ' 0$'", Show: "gpprogs"}.Cmd()+"; gpprogs; cat /sys/kernel/debug/kprobes/list; cat /sys/kernel/tracing/kprobe_events")
		t.Logf("after SIGKILL:\n%s", after)
		if !strings.HasPrefix(after, "gpprogs gp_ 0\n") {
			t.Errorf("programs left:\n%s", after)
		}
		for _, l := range strings.Split(strings.TrimSpace(after), "\n")[1:] {
			// the maxactive 64 kretprobe's tracefs event, and its kprobe,
			// disabled: nothing else
			if !strings.Contains(l, "[DISABLED]") && !strings.Contains(l, ":gprobes_") {
				t.Errorf("left: %s", l)
			}
		}
		// the next start of the kernel target removes the event
		r := runKernel(t, vm, "/root/kernel/getppid_entry.dpdf", "gpwork counts 3")
		r.probe(t, 1, "fentry", "active", 3)
		if strings.Contains(after, ":gprobes_") && !strings.Contains(r.out, "gprobes: removed 1 kprobe event(s) a killed gprobes had left in kprobe_events\n") {
			t.Errorf("the stale event was not removed:\n%s", r.out)
		}
		clean := mustGuest(t, vm, "gpprogs; cat /sys/kernel/debug/kprobes/list; cat /sys/kernel/tracing/kprobe_events; gpwork counts 3")
		if !strings.HasPrefix(clean, "gpprogs gp_ 0\nGPWORK pid ") || !strings.Contains(clean, "GPWORK done getppid 3 read 3 write 3 open 6\n") {
			t.Errorf("after the next run:\n%s", clean)
		}
	})
}

func sameMap(a, b map[uint16]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// timed runs cmd in the guest and returns how long it took there, in
// seconds (/proc/uptime: the guest's clock follows the host's).
func timed(t *testing.T, vm *qemulab.VM, cmd string) float64 {
	t.Helper()
	out := mustGuest(t, vm, "s=$(cut -d' ' -f1 /proc/uptime); "+cmd+"; st=$?; e=$(cut -d' ' -f1 /proc/uptime); echo TIMED $s $e; exit $st")
	m := regexp.MustCompile(`(?m)^TIMED ([0-9.]+) ([0-9.]+)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("%s: no times:\n%s", cmd, out)
	}
	s, _ := strconv.ParseFloat(m[1], 64)
	e, _ := strconv.ParseFloat(m[2], 64)
	return e - s
}

// queryDaemon is `gprobes query --all --json` in the guest.
func queryDaemon(t testing.TB, vm *qemulab.VM) []daemon.TargetProbe {
	t.Helper()
	out := mustGuest(t, vm, "gprobes query --all --json")
	var q struct {
		Probes []daemon.TargetProbe `json:"probes"`
	}
	if err := json.Unmarshal([]byte(out), &q); err != nil {
		t.Fatalf("query: %v\n%s", err, out)
	}
	return q.Probes
}

// waitState waits in the guest until query shows module's probes in
// state and returns how long that took, in seconds.
func waitState(t *testing.T, vm *qemulab.VM, module, state, before string) float64 {
	t.Helper()
	d := timed(t, vm, before+"; "+labkit.Wait{What: module + "'s probes " + state, Cond: "gprobes query " + module + " | grep -q ' " + state + " '", Show: "gprobes query " + module}.Cmd())
	return d
}

// daemonServing waits in the guest until the daemon just started (pid $!,
// output in /tmp/daemon.log) serves.
var daemonServing = labkit.Wait{What: "gprobes daemon", Cond: "grep -q 'serving /run/gprobes/gprobes.sock' /tmp/daemon.log", Show: "cat /tmp/daemon.log", Pid: "$!"}.Cmd()

// The probes of a kernel module, through the daemon: pending, active at
// the module's load, pending at its unload, and so on.
func testKernelLabModules(t *testing.T, vm *qemulab.VM) {
	size, bufOff := rmd160Layout(t)
	mustGuest(t, vm, "modprobe algif_hash && ! grep -q rmd160 /proc/modules")
	// a module that does not exist
	out, rc := guest(t, vm, "gprobes insert --target kernel /root/kernel/nosuchmod.dpdf")
	if rc != 1 || !strings.Contains(out, "no kernel module no_such_module_gp is loaded, built in or installed") {
		t.Errorf("a module that does not exist: status %d\n%s", rc, out)
	}
	out, rc = guest(t, vm, "gprobes run --target kernel /root/kernel/nosuchmod.dpdf -- gpwork counts 1")
	if rc != 1 || !strings.Contains(out, "no kernel module no_such_module_gp is loaded, built in or installed") || strings.Contains(out, "GPWORK") {
		t.Errorf("run, a module that does not exist: status %d\n%s", rc, out)
	}

	// one probe, its state, how and hits; lv 0 by getvars
	check := func(step, state, how string, hits int, reason string) {
		t.Helper()
		q := queryDaemon(t, vm)
		var found bool
		for _, p := range q {
			if p.Module != "rmd160" {
				continue
			}
			found = true
			if string(p.State) != state || p.How != how || p.Hits != uint64(hits) || p.Faults != 0 || p.Missed != 0 || !strings.Contains(p.Reason, reason) {
				t.Errorf("%s: %s %s, how %q, %d hits (%d faults, %d missed), reason %q; want %s, how %q, %d hits, reason %q",
					step, p.Location, p.State, p.How, p.Hits, p.Faults, p.Missed, p.Reason, state, how, hits, reason)
			}
		}
		if !found {
			t.Fatalf("%s: no probe of rmd160 in %+v", step, q)
		}
		if state == "active" || hits > 0 {
			out := mustGuest(t, vm, "gprobes getvars rmd160")
			want := fmt.Sprintf("rmd160: lv 0=%d 1=%d 2=%d\n", hits, size, bufOff)
			if hits == 0 {
				want = "rmd160: lv 0=0 1=0 2=0\n"
			}
			if !strings.Contains(out, want) {
				t.Errorf("%s: getvars, want %q:\n%s", step, want, out)
			}
		}
	}
	hash := func(n int) {
		t.Helper()
		out := mustGuest(t, vm, fmt.Sprintf("gpwork hash rmd160 %d", n))
		if !strings.Contains(out, fmt.Sprintf("GPWORK hash rmd160 %d 8eb208f7e05d987a9b044a8e98c6b087f15a0bfc\n", n)) {
			t.Errorf("gpwork hash:\n%s", out)
		}
	}

	mustGuest(t, vm, "gprobes insert --target kernel /root/kernel/rmd160.dpdf")
	check("inserted, rmd160 not loaded", "pending", "", 0, "kernel module rmd160 is not loaded")

	d := waitState(t, vm, "rmd160", "active", "modprobe rmd160")
	t.Logf("modprobe rmd160: active after %.2f s", d)
	check("loaded", "active", "kprobe", 0, "")
	hash(20)
	check("20 hashes", "active", "kprobe", 20, "")

	d = waitState(t, vm, "rmd160", "pending", "rmmod rmd160")
	t.Logf("rmmod rmd160: pending after %.2f s", d)
	check("unloaded", "pending", "kprobe", 20, "kernel module rmd160 was unloaded; its probes go in again when it is loaded")

	d = waitState(t, vm, "rmd160", "active", "modprobe rmd160")
	t.Logf("modprobe rmd160 again: active after %.2f s", d)
	hash(7)
	check("loaded again, 7 hashes", "active", "kprobe", 27, "")

	// unloaded and loaded again within one poll: the kernel drops the
	// kprobe ([GONE] in its list); gprobes places it again
	d = timed(t, vm, "rmmod rmd160 && modprobe rmd160; "+labkit.Wait{What: "rmd160_final's kprobe placed again", Cond: "grep rmd160_final /sys/kernel/debug/kprobes/list | grep -vq GONE", Show: "cat /sys/kernel/debug/kprobes/list"}.Cmd())
	t.Logf("rmmod and modprobe at once: the kprobe placed again after %.2f s", d)
	hash(5)
	check("reloaded at once, 5 hashes", "active", "kprobe", 32, "")
}

// manyProbes writes a module (name = vmlinux) of n probes at the entries
// of n distinct system call functions of the lab kernel (System.map's
// __x64_sys_*), each running body then inc lv,0.
func manyProbes(t *testing.T, body string, n int) (string, []string) {
	t.Helper()
	dir, err := qemulab.Artifacts()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "System.map"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 3 && (fs[1] == "T" || fs[1] == "t") && strings.HasPrefix(fs[2], "__x64_sys_") {
			seen[fs[2]] = true
		}
	}
	var fns []string
	for fn := range seen {
		fns = append(fns, fn)
	}
	sort.Strings(fns)
	if len(fns) < n {
		t.Fatalf("only %d __x64_sys_* functions", len(fns))
	}
	fns = fns[:n]
	var b strings.Builder
	fmt.Fprintf(&b, "name = vmlinux\nmodtype = kernel\nvars = 1\n")
	for i, fn := range fns {
		fmt.Fprintf(&b, "\noffset = %s\nminor = %d\n%sinc lv,0\nexit 0\n", fn, i+1, body)
	}
	return b.String(), fns
}

// BenchmarkKernelLabTable1 is Xenprobes' Table 1 in the lab guest: the
// cost of getppid, read, write and open (gpwork lat, lmbench lat_syscall
// style, ns per call by the workload's own clock) native and with a
// counting probe (inc lv,0) on the kernel function each goes through
// (qemulab.LatencyCalls), inserted through the daemon (system-wide, as
// Xenprobes' probes were): at the entry as fentry, at the entry reading
// rsp (so a kprobe), and as a kretprobe; factors over native. Under TCG
// the guest's clock is the host's, and a busy host slows some runs
// several times: each cell is the best of 60 short runs (3 rounds, each
// inserting the probe and running gpwork 20 times), the median logged too.
// Compare factors, not nanoseconds, with real hardware. The table is
// logged (go test -run '^$' -bench KernelLabTable1 -benchtime 1x -v
// ./cmd/gprobes); BENCHMARKS.md has one.
func BenchmarkKernelLabTable1(b *testing.B) {
	type config struct{ name, body, loc string }
	configs := []config{
		{"native", "", ""},
		{"fentry", "", "offset"},
		{"kprobe", "push r,rsp\n", "offset"},
		{"kretprobe", "", "retprobe"},
	}
	// short runs (a millisecond or a few): on a host that other guests
	// share, some fit between two preemptions of this one
	ns := map[string]int{"null": 2000, "read": 2000, "write": 2000, "open": 500}
	const rounds, runs = 3, 20
	var extra []qemulab.File
	for _, c := range qemulab.LatencyCalls {
		for _, cf := range configs[1:] {
			extra = append(extra, qemulab.File{Guest: fmt.Sprintf("/root/t1_%s_%s.dpdf", c.Kind, cf.name),
				Data: fmt.Appendf(nil, "name = vmlinux\nmodtype = kernel\nvars = 1\n%s = %s\n%sinc lv,0\nexit 0\n", cf.loc, c.Fn, cf.body)})
		}
	}
	vm := bootKernelLab(b, extra...)
	mustGuest(b, vm, "gprobes daemon </dev/null >/tmp/daemon.log 2>&1 & "+daemonServing)
	load := func() string { b, _ := os.ReadFile("/proc/loadavg"); return strings.TrimSpace(string(b)) }
	loadBefore := load()
	latRe := regexp.MustCompile(`(?m)^GPWORK lat \w+ ([0-9.]+)$`)
	res := map[string][]float64{}
	for round := 0; round < rounds; round++ {
		for _, c := range qemulab.LatencyCalls {
			for _, cf := range configs {
				if cf.name != "native" {
					out := mustGuest(b, vm, fmt.Sprintf("gprobes insert --target kernel /root/t1_%s_%s.dpdf", c.Kind, cf.name))
					if !strings.Contains(out, " active ") || !strings.Contains(out, " "+cf.name+" ") {
						b.Fatalf("%s on %s:\n%s", cf.name, c.Fn, out)
					}
				}
				out := mustGuest(b, vm, fmt.Sprintf("for i in $(seq %d); do gpwork lat %s %d; done", runs, c.Kind, ns[c.Kind]))
				m := latRe.FindAllStringSubmatch(out, -1)
				if len(m) != runs {
					b.Fatalf("gpwork lat %s:\n%s", c.Kind, out)
				}
				key := c.Kind + "/" + cf.name
				for _, x := range m {
					v, _ := strconv.ParseFloat(x[1], 64)
					res[key] = append(res[key], v)
				}
				if cf.name != "native" {
					q := queryDaemon(b, vm)
					if round == 0 && len(q) == 1 {
						b.Logf("%s on %s: %d hits for %d runs of %d timed calls and their warm-up", q[0].How, c.Fn, q[0].Hits, runs, ns[c.Kind])
					}
					mustGuest(b, vm, "gprobes remove vmlinux")
				}
			}
		}
	}
	median := func(v []float64) float64 {
		s := slices.Clone(v)
		slices.Sort(s)
		return s[len(s)/2]
	}
	table := func(pick func([]float64) float64, metrics bool) string {
		var t strings.Builder
		fmt.Fprintf(&t, "| call | function | native ns | fentry ns | × | kprobe ns | × | kretprobe ns | × |\n|---|---|---|---|---|---|---|---|---|\n")
		for _, c := range qemulab.LatencyCalls {
			nat := pick(res[c.Kind+"/native"])
			fmt.Fprintf(&t, "| %s | `%s` | %.0f |", c.Kind, c.Fn, nat)
			for _, cf := range configs[1:] {
				v := pick(res[c.Kind+"/"+cf.name])
				fmt.Fprintf(&t, " %.0f | %.2f |", v, v/nat)
				if metrics {
					b.ReportMetric(v/nat, c.Kind+"-"+cf.name+"-x")
				}
			}
			t.WriteString("\n")
		}
		return t.String()
	}
	b.Logf("gpwork lat in the lab guest (TCG, 1 vCPU), ns per call, × over native; host load average %s before, %s after\nbest of %d runs:\n%s\nmedian:\n%s\nall runs: %v",
		loadBefore, load(), rounds*runs, table(slices.Min[[]float64], true), table(median, false), res)
}

// rmd160Layout reads sizeof(struct rmd160_ctx) and offsetof its buffer
// from the BTF of the lab's rmd160.ko on this side (split on the lab
// vmlinux's .BTF), for the values the guest's gprobes takes from
// /sys/kernel/btf/rmd160.
func rmd160Layout(t *testing.T) (size, bufOff uint64) {
	t.Helper()
	ko := labRmd160Ko(t)
	section := func(path string) []byte {
		f, err := elf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		sec := f.Section(".BTF")
		if sec == nil {
			t.Fatalf("%s has no .BTF", path)
		}
		b, err := sec.Data()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	dir, err := qemulab.Artifacts()
	if err != nil {
		t.Fatal(err)
	}
	base, err := btf.LoadSpecFromReader(bytes.NewReader(section(filepath.Join(dir, "vmlinux"))))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := btf.LoadSplitSpecFromReader(bytes.NewReader(section(ko)), base)
	if err != nil {
		t.Fatal(err)
	}
	var st *btf.Struct
	if err := spec.TypeByName("rmd160_ctx", &st); err != nil {
		t.Fatal(err)
	}
	for _, m := range st.Members {
		if m.Name == "buffer" {
			return uint64(st.Size), uint64(m.Offset.Bytes())
		}
	}
	t.Fatalf("struct rmd160_ctx has no buffer: %+v", st)
	return 0, 0
}

// recordWords is a record's logged words.
func recordWords(rec daemon.LogLine) []uint64 {
	d, err := hex.DecodeString(rec.Data)
	if err != nil {
		return nil
	}
	var w []uint64
	for len(d) >= 8 {
		w = append(w, binary.LittleEndian.Uint64(d))
		d = d[8:]
	}
	return w
}

// testKernelLabIV: instance variables with four processes calling getppid
// at once, through the daemon (testdata/kernel/getppid_iv.dpdf): each
// process's records are exactly its calls, each carries its own task's
// instance, a positive latency and the return value (the shell that
// started it).
func testKernelLabIV(t *testing.T, vm *qemulab.VM) {
	const n, procs = 500, 4
	mustGuest(t, vm, "gprobes insert --target kernel /root/kernel/getppid_iv.dpdf")
	defer guest(t, vm, "gprobes remove vmlinux")
	out := mustGuest(t, vm, fmt.Sprintf("echo SH $$; for i in $(seq %d); do gpwork counts %d & done; wait", procs, n))
	sh := regexp.MustCompile(`(?m)^SH (\d+)$`).FindStringSubmatch(out)
	pids := map[int]int{}
	for _, m := range gpworkPidRe.FindAllStringSubmatch(out, -1) {
		p, _ := strconv.Atoi(m[1])
		pids[p] = 0
	}
	if sh == nil || len(pids) != procs {
		t.Fatalf("no shell pid or not %d gpwork pids:\n%s", procs, out)
	}
	shell, _ := strconv.ParseUint(sh[1], 10, 64)
	q := queryDaemon(t, vm)
	for _, p := range q {
		if p.Module != "vmlinux" {
			continue
		}
		want := map[uint16]string{1: "kprobe", 2: "kretprobe"}[p.Minor]
		if p.State != "active" || !strings.HasPrefix(p.How, want) || p.Hits < procs*n || p.Missed != 0 || p.Faults != 0 {
			t.Errorf("minor %d: %s (%s), how %s, hits %d, missed %d, faults %d; want active, %s, at least %d hits", p.Minor, p.State, p.Reason, p.How, p.Hits, p.Missed, p.Faults, want, procs*n)
		}
	}
	bad := 0
	for _, l := range strings.Split(mustGuest(t, vm, "gprobes log --json"), "\n") {
		var rec daemon.LogLine
		if json.Unmarshal([]byte(l), &rec) != nil || rec.Major != 4 {
			continue
		}
		if _, ours := pids[rec.Pid]; !ours {
			continue
		}
		pids[rec.Pid]++
		w := recordWords(rec)
		if rec.Kind != "log" || rec.Minor != 2 || len(w) != 3 || w[0] == 0 || w[0] > 1e9 || w[1] != 0 || w[2] != shell {
			if bad++; bad <= 5 {
				t.Errorf("record %+v: words %v; want 0 < ns < 1e9, 0 (its own task's instance), return %d", rec, w, shell)
			}
		}
	}
	for p, k := range pids {
		if k != n {
			t.Errorf("gpwork %d: %d records, want %d", p, k, n)
		}
	}
}

// otherBuild is a copy of the lab's rmd160.ko with one byte of its build
// ID changed: another build of the module, for a pack.
type otherBuild struct {
	data      []byte
	id, other []byte
}

func rmd160OtherBuild(t *testing.T) otherBuild {
	t.Helper()
	data, id, other, err := qemulab.OtherBuild(labRmd160Ko(t))
	if err != nil {
		t.Fatal(err)
	}
	return otherBuild{data: data, id: id, other: other}
}

// testKernelLabModulePack (docs/ppdf.md, "Packs for customers"): packs bound to a kernel module's
// build. In the guest, gprobes builds rmd160.dpdf for the module's .ko (its
// .note.gnu.build-id; its symbols have no addresses before it loads, so
// the location stays symbolic; its types are split BTF on the kernel's),
// for a copy with another build ID, and for both in one pack. The pack
// for this build goes in. With rmd160 loaded, the pack for the other build is refused
// naming the loaded module's ID and the pack's; the pack of both goes in,
// picks the loaded build, and counts exactly.
func testKernelLabModulePack(t *testing.T, vm *qemulab.VM, o otherBuild) {
	guest(t, vm, "gprobes remove rmd160")
	mustGuest(t, vm, "modprobe rmd160")
	ko := strings.TrimSpace(mustGuest(t, vm, "find /lib/modules -name rmd160.ko | head -1"))
	// the .ko's BTF is split on the kernel's: its types need vmlinux's
	const kbtf = "/sys/kernel/btf/vmlinux"
	mustGuest(t, vm, "gprobes build /root/kernel/rmd160.dpdf --symbols "+ko+" --symbols "+kbtf+" -o /tmp/this.ppdf")
	mustGuest(t, vm, "gprobes build /root/kernel/rmd160.dpdf --symbols /root/rmd160-other.ko --symbols "+kbtf+" -o /tmp/other.ppdf")
	out := mustGuest(t, vm, "gprobes build /root/kernel/rmd160.dpdf --for "+ko+","+kbtf+" --for /root/rmd160-other.ko,"+kbtf+" -o /tmp/both.ppdf")
	if !strings.Contains(out, "2 builds") {
		t.Errorf("build --for twice:\n%s", out)
	}
	mustGuest(t, vm, "gprobes insert --target kernel /tmp/this.ppdf && gpwork hash rmd160 3")
	for _, p := range queryDaemon(t, vm) {
		if p.Module == "rmd160" && (p.State != "active" || p.Hits != 3) {
			t.Errorf("the pack for this build: %s %s, %d hits; want active, 3", p.State, p.Reason, p.Hits)
		}
	}
	guest(t, vm, "gprobes remove rmd160")
	out, _ = guest(t, vm, "gprobes insert --target kernel /tmp/other.ppdf; gprobes query --all")
	idHex, otherHex := fmt.Sprintf("%x", o.id), fmt.Sprintf("%x", o.other)
	if !strings.Contains(out, "refused") || !strings.Contains(out, idHex) || !strings.Contains(out, otherHex) {
		t.Errorf("a pack for another build of rmd160: want refused naming %s and %s:\n%s", idHex, otherHex, out)
	}
	guest(t, vm, "gprobes remove rmd160")
	mustGuest(t, vm, "gprobes insert --target kernel /tmp/both.ppdf")
	mustGuest(t, vm, "gpwork hash rmd160 9")
	q := queryDaemon(t, vm)
	hits := -1
	for _, p := range q {
		if p.Module == "rmd160" {
			if p.State != "active" {
				t.Errorf("the pack of both builds: %s %s", p.State, p.Reason)
			}
			hits = int(p.Hits)
		}
	}
	if hits != 9 {
		t.Errorf("the pack of both builds: %d hits, want 9", hits)
	}
	guest(t, vm, "gprobes remove rmd160")
}

// labRmd160Ko is the path of the lab's rmd160.ko on this side.
func labRmd160Ko(t *testing.T) string {
	t.Helper()
	dir, err := qemulab.Artifacts()
	if err != nil {
		t.Fatal(err)
	}
	kos, _ := filepath.Glob(filepath.Join(dir, "..", "kernel", "*", "modules", "kernel", "crypto", "rmd160.ko"))
	if len(kos) != 1 {
		t.Fatalf("the lab's rmd160.ko: %v", kos)
	}
	return kos[0]
}
