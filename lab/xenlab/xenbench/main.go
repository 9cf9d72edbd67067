// Command xenbench measures probes in a Xen PV guest's kernel from dom0, in
// the shape of Table 1 of the Xenprobes paper: the latency of the null
// (getppid), read, write and open system calls in a domU, native, probed
// by the native backend (xen:DOMID) with an empty program, with an empty
// return probe (Table 1's return-probe column: it needs nothing from the
// entry, so a breakpoint on the return only), with a return probe timing
// the call through an instance variable (a breakpoint on the entry and
// one on the return) and with a logging program (debug-register
// breakpoints reported by VIRQ_DEBUGGER),
// the logging program again with int3 breakpoints (found by the 1 ms
// state check: a second daemon with GPROBES_XEN_BREAKPOINTS=int3), and
// probed through gdbsx (gdb: against gdbsx in dom0) with the logging
// program. scripts/bench-xen runs it; BENCHMARKS.md
// reports it.
//
// The empty entry probe and the return probe are measured -rounds times,
// alternately, and the least of each is reported (the least disturbed by
// whatever else the machine runs), with the ratio of their costs a call
// over native in each round.
//
// Each native-backend measurement also gives the hypercalls its stops
// cost: the daemon's summary when the probes are removed and the target
// let go (every hypercall of the target's life, insertion and removal
// included, over its stops), printed per stop after the table.
//
//	xenbench [-n CALLS] [-native CALLS] [-gdbsx CALLS] [-rounds N] [-calls null,read,write,open] [-vcpus N]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/gprobes/gprobes/lab/qemulab"
	"github.com/gprobes/gprobes/lab/xenlab"
)

var calls = qemulab.LatencyCalls

var vcpus int

// summaryRe is the summary a Xen target writes when it is let go.
var summaryRe = regexp.MustCompile(`xen:\d+: (\d+) stops in .*; (\d+) hypercalls \((\d+) domctls`)

func main() {
	n := flag.Int("n", 1000, "probed system calls per measurement with the native backend")
	nativeN := flag.Int("native", 20000, "system calls per native measurement")
	gdbsxN := flag.Int("gdbsx", 100, "probed system calls per measurement through gdbsx (each costs tens of ms)")
	only := flag.String("calls", "", "comma-separated calls to measure (null,read,write,open; default all)")
	rounds := flag.Int("rounds", 3, "measurements of the empty entry probe and of the return probe, alternately")
	flag.IntVar(&vcpus, "vcpus", 1, "the domU's vCPUs")
	flag.Parse()
	if *only != "" {
		var keep []qemulab.LatencyCall // not calls[:0]: that would write over qemulab.LatencyCalls
		for _, c := range calls {
			if strings.Contains(","+*only+",", ","+c.Kind+",") {
				keep = append(keep, c)
			}
		}
		calls = keep
	}
	if err := run(*n, *nativeN, *gdbsxN, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "xenbench:", err)
		os.Exit(1)
	}
}

func run(n, nativeN, gdbsxN, rounds int) error {
	dir, err := os.MkdirTemp("", "xenbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "gprobes")
	build := exec.Command("go", "build", "-o", bin, "github.com/gprobes/gprobes/cmd/gprobes")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build gprobes: %v\n%s", err, out)
	}
	art, err := qemulab.Artifacts()
	if err != nil {
		return err
	}
	extra := map[string]string{"/bin/gprobes": bin, "/guest/System.map": filepath.Join(art, "System.map"), "/guest/vmlinux": filepath.Join(art, "vmlinux")}
	for _, c := range calls {
		for kind, body := range map[string]string{"empty": "exit 0\n", "logging": "inc lv,0\npush pid\npush r,rdi\nlog 2\nexit 1\n", "gdbsx": "inc lv,0\npush r,rdi\nlog 1\nexit 1\n", "return": "exit 0\n",
			"retiv": "push ts\npop iv,0\nexit 0\nretprobe = " + c.Fn + "\npush ts\npush iv,0\nsub\npop lv,0\nexit 0\n"} {
			p := filepath.Join(dir, c.Kind+"-"+kind+".dpdf")
			probe := "offset"
			if kind == "return" {
				probe = "retprobe"
			}
			os.WriteFile(p, []byte(fmt.Sprintf("name = vmlinux\nmodtype = kernel\nvars = 1\n%s = %s\n%s", probe, c.Fn, body)), 0o644)
			extra["/etc/gprobes/"+c.Kind+"-"+kind+".dpdf"] = p
		}
	}
	vm, err := xenlab.Boot(context.Background(), xenlab.Options{DomUs: 1, DomUVCPUs: vcpus, Extra: extra})
	if err != nil {
		return err
	}
	defer vm.Kill()
	dom := vm.DomID("domu1")
	dom0 := func(cmd string) error {
		fmt.Fprintf(os.Stderr, "xenbench: %s dom0: %.100s\n", time.Now().Format("15:04:05"), cmd)
		out, rc, err := vm.Run(cmd, 5*time.Minute)
		if err != nil || rc != 0 {
			dlog, _, _ := vm.Run("tail -40 /tmp/daemon.log", time.Minute)
			return fmt.Errorf("dom0: %s: rc %d %v\n%s\n--- the daemon's log ends:\n%s", cmd, rc, err, out, dlog)
		}
		return nil
	}
	lat := func(kind string, count int) (float64, error) {
		fmt.Fprintf(os.Stderr, "xenbench: %s gpwork lat %s %d\n", time.Now().Format("15:04:05"), kind, count)
		out, rc, err := vm.RunDomU("domu1", fmt.Sprintf("gpwork lat %s %d /etc/gp-a", kind, count), 30*time.Minute)
		if err != nil || rc != 0 {
			return 0, fmt.Errorf("gpwork lat %s: rc %d %v\n%s", kind, rc, err, out)
		}
		return qemulab.ParseLatency(out)
	}
	// the first daemon binds VIRQ_DEBUGGER, which its debug-register
	// probes are reported by; the int3 one, started once the first
	// serves, finds its stops by the 1 ms state check. Started together,
	// either could bind it first, and the debug-register rows then
	// measured the 50 ms state check instead (a run had them at 10-40 ms
	// a call)
	if err := dom0(xenlab.DaemonUp("", "/tmp/g.sock", "", "/tmp/daemon.log") + "; " + xenlab.DaemonUp("GPROBES_XEN_BREAKPOINTS=int3 ", "/tmp/g3.sock", "--state /tmp/g3", "/tmp/daemon3.log")); err != nil {
		return err
	}
	syms := "--symbols /guest/System.map --symbols /guest/vmlinux"
	fmt.Printf("Xen 4.17 (CONFIG_GDBSX) under QEMU TCG, PV domU with %d vCPU, Linux 6.1; %d probed calls (native backend), %d through gdbsx, %d native\n", vcpus, n, gdbsxN, nativeN)
	fmt.Printf("%-6s %10s %16s %16s %16s %16s %16s %18s %10s %10s %10s %10s\n", "call", "native us", "empty us", "return us", "ret+iv us", "logging us", "int3 log us", "gdbsx us", "gdbsx/log", "int3/log", "ret/entry", "iv/entry")
	for _, c := range calls {
		native, err := lat(c.Kind, nativeN)
		if err != nil {
			return err
		}
		probed := func(sock, kind string) (float64, error) {
			if err := dom0(fmt.Sprintf("gprobes insert --socket %s --target xen:%d %s /etc/gprobes/%s-%s.dpdf", sock, dom, syms, c.Kind, kind)); err != nil {
				return 0, err
			}
			v, err := lat(c.Kind, n)
			if err == nil && (kind == "return" || kind == "retiv") {
				err = returnsSeen(vm, sock, n)
			}
			if rerr := dom0("gprobes remove --socket " + sock + " --all"); rerr != nil && err == nil {
				err = rerr
			}
			if err == nil {
				what := c.Kind + " " + kind
				if sock == "/tmp/g3.sock" {
					what += " (int3)"
				}
				err = countHypercalls(vm, sock, what)
			}
			return v, err
		}
		var empty, ret, retiv float64
		var ratios []string
		for r := 0; r < max(rounds, 1); r++ {
			e, err := probed("/tmp/g.sock", "empty")
			if err != nil {
				return err
			}
			rt, err := probed("/tmp/g.sock", "return")
			if err != nil {
				return err
			}
			ri, err := probed("/tmp/g.sock", "retiv")
			if err != nil {
				return err
			}
			if r == 0 || e < empty {
				empty = e
			}
			if r == 0 || rt < ret {
				ret = rt
			}
			if r == 0 || ri < retiv {
				retiv = ri
			}
			ratios = append(ratios, fmt.Sprintf("%.2f/%.2f", (rt-native)/(e-native), (ri-native)/(e-native)))
		}
		logging, err := probed("/tmp/g.sock", "logging")
		if err != nil {
			return err
		}
		int3, err := probed("/tmp/g3.sock", "logging")
		if err != nil {
			return err
		}
		// gdbsx serves one connection: a fresh gdbsx for each measurement
		if err := dom0(xenlab.Gone("gdbsx") + "; " + xenlab.GdbsxUp(dom) + "; " + xenlab.RunUp("", fmt.Sprintf("--target gdb:127.0.0.1:9999 %s /etc/gprobes/%s-gdbsx.dpdf", syms, c.Kind), "/tmp/run.out")); err != nil {
			return err
		}
		gdbsx, err := lat(c.Kind, gdbsxN)
		if err != nil {
			return err
		}
		// gdbsx ignores ^C (its c waits for the domain to pause): after
		// the ^C, pausing the domain is what stops it, and gdbsx
		// unpauses it as gprobes detaches
		// (a hit may come first and end it: then no pause, which nobody
		// would undo)
		if err := dom0(xenlab.StopWaiting("/tmp/run.out") + fmt.Sprintf("; kill -0 $(cat /tmp/run.out.pid) 2>/dev/null && xl pause %d; ", dom) + xenlab.RunEnded("/tmp/run.out")); err != nil {
			return err
		}
		us := func(ns float64) string { return fmt.Sprintf("%.2f", ns/1000) }
		ratio := func(ns float64) string { return fmt.Sprintf("%s (%.0fx)", us(ns), ns/native) }
		fmt.Printf("%-6s %10s %16s %16s %16s %16s %16s %18s %9.1fx %9.2fx %9.2fx %9.2fx  (rounds: %s)\n", c.Kind, fmt.Sprintf("%.3f", native/1000), ratio(empty), ratio(ret), ratio(retiv), ratio(logging), ratio(int3), ratio(gdbsx),
			(gdbsx-native)/(logging-native), (int3-native)/(logging-native), (ret-native)/(empty-native), (retiv-native)/(empty-native), strings.Join(ratios, " "))
	}
	fmt.Printf("\nhypercalls a stop (domctls a stop), native backend, the target's whole life over its stops:\n")
	for _, h := range hcalls {
		fmt.Printf("  %-21s %6.2f (%5.2f)  %s\n", h.what, h.per, h.domctls, h.line)
	}
	return nil
}

var hcalls []struct {
	what         string
	per, domctls float64
	line         string
}

// countHypercalls takes the summary the daemon wrote when the last
// measurement's target was let go.
func countHypercalls(vm *xenlab.VM, sock, what string) error {
	logf := "/tmp/daemon.log"
	if sock == "/tmp/g3.sock" {
		logf = "/tmp/daemon3.log"
	}
	out, _, err := vm.Run("grep 'stops in' "+logf+" | tail -1", time.Minute)
	if err != nil {
		return err
	}
	m := summaryRe.FindStringSubmatch(out)
	if m == nil {
		return fmt.Errorf("%s: no hypercall count in the daemon's summary: %q", what, out)
	}
	var stops, hc, dc float64
	fmt.Sscan(m[1], &stops)
	fmt.Sscan(m[2], &hc)
	fmt.Sscan(m[3], &dc)
	hcalls = append(hcalls, struct {
		what         string
		per, domctls float64
		line         string
	}{what, hc / max(stops, 1), dc / max(stops, 1), strings.TrimSpace(out)})
	return nil
}

// returnsSeen checks a return probe's counters after n calls (and the
// warm-up's): every return seen, none missed or dropped.
func returnsSeen(vm *xenlab.VM, sock string, n int) error {
	out, rc, err := vm.Run("gprobes query --json --all --socket "+sock, time.Minute)
	if err != nil || rc != 0 {
		return fmt.Errorf("query: rc %d %v\n%s", rc, err, out)
	}
	var q struct {
		Probes []struct {
			Kind                  string
			Hits, Missed, Dropped uint64
		}
	}
	if err := json.Unmarshal([]byte(out), &q); err != nil {
		return fmt.Errorf("query: %v\n%s", err, out)
	}
	for _, p := range q.Probes {
		if p.Kind == "retprobe" && (p.Hits < uint64(n) || p.Missed != 0 || p.Dropped != 0) {
			return fmt.Errorf("return probe: %d returns for at least %d calls, %d missed, %d dropped", p.Hits, n, p.Missed, p.Dropped)
		}
	}
	return nil
}
