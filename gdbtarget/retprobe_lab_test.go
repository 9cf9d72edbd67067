package gdbtarget_test

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/gdbtarget"
)

// Return probes on a guest kernel through QEMU's stub: the example
// testdata/examples/getppid_latency.dpdf on __x64_sys_getppid (which
// returns by a jmp to the return thunk in the package's code: the live
// code decides whether that is patched to a ret) and one on ksys_write,
// which returns through more than one path. Exact counts for the
// workload's process, the return value its parent's pid, the call's
// latency from an instance variable; with and without KASLR.
func TestGuestRetprobe(t *testing.T) {
	for _, kaslr := range []bool{false, true} {
		t.Run(fmt.Sprintf("kaslr=%v", kaslr), func(t *testing.T) { guestRetprobe(t, kaslr) })
	}
}

func guestRetprobe(t *testing.T, kaslr bool) {
	g := boot(t, kaslr)
	g.attach(gdbtarget.Options{})
	src, err := os.ReadFile("../testdata/examples/getppid_latency.dpdf")
	if err != nil {
		t.Fatal(err)
	}
	m := compile(t, string(src)+`
retprobe = ksys_write
minor = 3
push pid
push r,rax
log 2
exit 1
`)
	infos := g.insert(m)
	for _, p := range infos {
		t.Logf("probe %d %s %s: %s", p.Minor, p.Kind, p.Location, p.How)
	}
	if infos[1].Kind != "retprobe" || !strings.HasPrefix(infos[1].How, "ret: entry and ") {
		t.Errorf("retprobe: kind %q, HOW %q", infos[1].Kind, infos[1].How)
	}
	const n = 7
	// the shell that runs the line execs gpwork: its parent is gpwork's
	pid, out := g.run(fmt.Sprintf("grep PPid /proc/$$/status; exec gpwork counts %d /etc/gp-a", n))
	if !strings.Contains(out, fmt.Sprintf("GPWORK done getppid %d read %d write %d open %d", n, n, n, n)) {
		t.Fatalf("the workload did not finish correctly:\n%s", out)
	}
	var ppid uint64
	if m := regexp.MustCompile(`PPid:\s+(\d+)`).FindStringSubmatch(out); m != nil {
		fmt.Sscan(m[1], &ppid)
	} else {
		t.Fatalf("no PPid in\n%s", out)
	}
	// getppid: the workload's n, the shell's one before it exec'd
	rets := g.of(pid, 2)
	if len(rets) != n+1 {
		t.Errorf("%d returns of getppid by pid %d, want %d", len(rets), pid, n+1)
	}
	for _, r := range rets {
		if got, lat := word(r, 1), int64(word(r, 2)); got != ppid || lat <= 0 {
			t.Errorf("getppid returned %d in %d ns, want %d (the parent's pid) in a positive time", got, lat, ppid)
		}
	}
	// write: n bytes to fd 4, then one line per output line to fd 1
	ones := 0
	for _, r := range g.of(pid, 3) {
		if word(r, 1) == 1 {
			ones++
		}
	}
	if ones != n {
		t.Errorf("%d writes by pid %d returned 1, want %d", ones, pid, n)
	}
	for _, p := range g.eng.Query() {
		t.Logf("query: %d %s: hits %d missed %d dropped %d", p.Minor, p.Location, p.Hits, p.Missed, p.Dropped)
		if p.Minor == 2 && (p.Hits < n+1 || p.Missed != 0 || p.Dropped != 0) {
			t.Errorf("query: %+v", p)
		}
	}
	// out again: the guest runs on unprobed
	if _, err := g.eng.Remove("vmlinux", nil); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	before := len(g.recs)
	g.mu.Unlock()
	g.run("gpwork counts 3")
	g.mu.Lock()
	after := len(g.recs)
	g.mu.Unlock()
	if after != before {
		t.Errorf("%d records after remove", after-before)
	}
	if p := g.eng.Query(); len(p) != 0 {
		t.Errorf("query after remove: %+v", p)
	}
}
