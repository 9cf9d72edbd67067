//go:build linux

package ptrace_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/ptrace"
)

// mapsSummary is what a process has mapped: how many mappings, how many
// bytes, and the lines (for the failure message).
type mapsSummary struct {
	n     int
	bytes uint64
	lines []string
}

func mapsOf(t *testing.T, pid int) mapsSummary {
	t.Helper()
	maps, err := ptrace.Maps(pid)
	if err != nil {
		t.Fatal(err)
	}
	var s mapsSummary
	for _, m := range maps {
		s.n++
		s.bytes += m.End - m.Start
		s.lines = append(s.lines, fmt.Sprintf("%x-%x %s %s", m.Start, m.End, m.Perm, m.Path))
	}
	return s
}

func (s mapsSummary) same(o mapsSummary) bool { return s.n == o.n && s.bytes == o.bytes }

func mapsDiff(a, b mapsSummary) string {
	in := map[string]bool{}
	for _, l := range a.lines {
		in[l] = true
	}
	var out []string
	for _, l := range b.lines {
		if !in[l] {
			out = append(out, "+ "+l)
		}
		delete(in, l)
	}
	for l := range in {
		out = append(out, "- "+l)
	}
	return strings.Join(out, "\n")
}

const cycleProbes = "name = PROGRAM\nmodtype = user\nvars = 2\noffset = f_lock\nminor = 1\ninc lv,0\nexit 0\noffset = f_push\nminor = 2\ninc lv,1\nexit 0\n"

// A daemon that samples a long-lived process attaches, inserts, removes
// and lets go, again and again. 60 such cycles against the 4-thread
// testdata/harm fixture, running all along: every cycle both probes go on
// the jump route (f_lock's RIP-relative lock add too, which needs its pad
// within ±2 GiB) and count, and after every detach the process has
// exactly the mappings it had before the first attach (what gprobes
// mapped, 3.7 MB a cycle, is unmapped). Then the program's own totals
// are exact and it exits 0. Before: the mappings grew by 3.7 MB a cycle,
// and from the third cycle "no memory within ±2 GiB" put every probe on
// an int3 and refused f_lock.
func TestJumpAttachCycles(t *testing.T) {
	harm := testkit.CC(t, "harm", "-O1", "-pthread", "../testdata/harm/harm.c", "../testdata/harm/funcs.S")
	dir := t.TempDir()
	started, stop := dir+"/started", dir+"/stop"
	cmd := exec.Command(harm, "-t", "4", "-n", "1000000000000", "-s", started, "-e", stop)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	testkit.WaitTrue(t, time.Minute, "the fixture's threads calling", func() bool { return exists(started) })
	base := mapsOf(t, pid)
	procs := childrenOfMine()
	cycles := 60
	if testing.Short() {
		cycles = 6
	}
	for c := 0; c < cycles; c++ {
		eng, err := engine.Start(ptrace.Attach(pid), engine.Options{Warn: func(m string) { t.Log("engine:", m) }})
		if err != nil {
			t.Fatalf("cycle %d: attach: %v", c, err)
		}
		infos, err := eng.Insert(compileFor(t, harm, cycleProbes), engine.InsertNew)
		if err != nil {
			eng.Close()
			t.Fatalf("cycle %d: insert: %v", c, err)
		}
		for _, p := range infos {
			if p.State != engine.StateActive || p.How != "jump" {
				eng.Close()
				t.Fatalf("cycle %d: %s: %s, how %q (%s)", c, p.Location, p.State, p.How, p.Reason)
			}
		}
		eng.Release()
		testkit.Wait(t, time.Minute, "hits of both probes", func() (bool, string) {
			q := eng.Query()
			return len(q) == 2 && q[0].Hits > 0 && q[1].Hits > 0, fmt.Sprintf("%+v", q)
		})
		if _, err := eng.Close(); err != nil {
			t.Fatalf("cycle %d: detach: %v", c, err)
		}
		if now := mapsOf(t, pid); !now.same(base) {
			t.Fatalf("cycle %d: after the detach %d mappings, %d bytes; before the first attach %d, %d:\n%s", c, now.n, now.bytes, base.n, base.bytes, mapsDiff(base, now))
		}
		// nor a process of gprobes' (the tracer's kickee) left, zombie
		// or alive
		if now := childrenOfMine(); now != procs {
			t.Fatalf("cycle %d: this process has %d children after the detach, %d before the first attach", c, now, procs)
		}
	}
	os.WriteFile(stop, nil, 0o644)
	err := cmd.Wait()
	var ws syscall.WaitStatus
	if cmd.ProcessState != nil {
		ws = cmd.ProcessState.Sys().(syscall.WaitStatus)
	}
	var total, want int
	fmt.Sscanf(out.String()[strings.LastIndex(out.String(), "total"):], "total %d want %d", &total, &want)
	if err != nil || total != want || want == 0 {
		t.Fatalf("the fixture: %v (%v): %q", err, ws, out.String())
	}
	t.Logf("%d cycles; %s", cycles, strings.TrimSpace(out.String()))
}

// One engine, a module that stays and probes inserted and removed again
// and again (a sampling daemon with a resident probe): the pads, slots,
// counters and variables of the removed probes are used again once no
// thread can be in their code, so the process's mappings stay what they
// were after the first cycle, and every cycle's probes go in as the
// first's did. On the jump route each cycle puts 8 probes on 4 jumps
// (8 of the region's 1024 counters, 4 pads: 140 cycles need 1120
// counters); on the int3 route 8 probes on 8 out-of-line slots (300
// cycles need 2400 of an area's 2048). 4
// threads run all along; the program's totals are exact, exit 0. Before:
// nothing was used again, a new area was mapped whenever one was full,
// and the probes went to the int3 route once the counters ran out.
func TestJumpModuleCycles(t *testing.T) {
	testkit.SkipShort(t, "hundreds of cycles: the full run has them")
	harm := testkit.CC(t, "harm", "-O1", "-pthread", "../testdata/harm/harm.c", "../testdata/harm/funcs.S")
	for _, c := range []struct {
		route  string
		at     []string // two probes at each on the jump route
		how    string
		cycles int
	}{
		{engine.RouteAuto, []string{"f_lock", "f_lock+9", "f_rip", "f_rip+11"}, "jump", 140},
		{engine.RouteInt3, []string{"f_lock", "f_lock+9", "f_rip", "f_rip+7", "f_rip+11", "f_push+1", "f_push+4", "f_push+8"}, "", 300},
	} {
		t.Run(map[string]string{engine.RouteAuto: "jump", engine.RouteInt3: "int3"}[c.route], func(t *testing.T) {
			cycles := c.cycles
			dir := t.TempDir()
			started, stop := dir+"/started", dir+"/stop"
			r := startWith(t, startConfig{path: harm, route: c.route}, "-t", "4", "-n", "1000000000000", "-s", started, "-e", stop)
			resident := "name = PROGRAM\nmodtype = user\nvars = 2\noffset = f_push\nminor = 2\ninc lv,1\nexit 0\n"
			if infos := r.insert(compileFor(t, harm, resident)); infos[0].State != engine.StateActive {
				t.Fatalf("the resident probe: %+v", infos[0])
			}
			r.release()
			testkit.WaitTrue(t, time.Minute, "the fixture's threads calling", func() bool { return exists(started) })
			cycling := "name = PROGRAM\nmodtype = user\nvars = 2\n"
			perAddr := 1
			if c.route == engine.RouteAuto {
				perAddr = 2
			}
			var minors []uint16
			for _, at := range c.at {
				for k := 0; k < perAddr; k++ {
					minor := uint16(10 + len(minors))
					minors = append(minors, minor)
					cycling += fmt.Sprintf("offset = %s\nminor = %d\ninc lv,0\nexit 0\n", at, minor)
				}
			}
			var first mapsSummary
			for i := 0; i < cycles; i++ {
				infos, err := r.eng.Insert(compileFor(t, harm, cycling), engine.InsertMerge)
				if err != nil || len(infos) == 0 {
					t.Fatalf("cycle %d: %v %+v", i, err, infos)
				}
				for _, p := range infos {
					if p.Minor >= 10 && (p.State != engine.StateActive || c.how == "jump" && p.How != "jump" || c.how == "" && strings.Contains(p.How, "jump")) {
						t.Fatalf("cycle %d: %s: %s, how %q (%s)", i, p.Location, p.State, p.How, p.Reason)
					}
				}
				if n, err := r.eng.Remove(harm, minors); err != nil || n != len(minors) {
					t.Fatalf("cycle %d: remove: %d %v", i, n, err)
				}
				now := mapsOf(t, r.eng.Pid())
				if i == 0 {
					first = now
				} else if !now.same(first) {
					t.Fatalf("cycle %d: %d mappings, %d bytes; after the first cycle %d, %d:\n%s", i, now.n, now.bytes, first.n, first.bytes, mapsDiff(first, now))
				}
			}
			if q := r.eng.Query(); q[0].Hits == 0 {
				t.Errorf("the resident probe: no hits: %+v", q[0])
			}
			os.WriteFile(stop, nil, 0o644)
			lines := r.finish()
			if out := strings.Join(lines, "\n"); !strings.Contains(out, "total") {
				t.Fatalf("the fixture: %q", lines)
			}
			t.Logf("%d cycles: %s", cycles, lines[len(lines)-1])
		})
	}
}

// childrenOfMine counts the test process's children, zombies included
// (/proc/self/task/*/children).
func childrenOfMine() int {
	ents, _ := os.ReadDir("/proc/self/task")
	n := 0
	for _, e := range ents {
		b, _ := os.ReadFile("/proc/self/task/" + e.Name() + "/children")
		n += len(strings.Fields(string(b)))
	}
	return n
}
