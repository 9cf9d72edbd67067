// Command guestbench measures probes in a guest kernel through QEMU's GDB
// stub, in the shape of Table 1 of the Xenprobes paper: the latency of the
// null (getppid), read, write and open system calls in the guest, native,
// probed with an empty program, with an empty return probe (Table 1's
// return-probe column: it needs nothing from the entry, so a breakpoint
// on the return only), with a return probe timing the call through an
// instance variable (the entry probe's push ts; pop iv,0, the return's
// push ts; push iv,0; sub: a breakpoint on the entry and one on the
// return), with a logging program, and with the same program logging
// the kernel stack too (log kstack: the ORC walk through guest memory);
// next to
// the raw stub round trip (a hand-written loop that only steps over the
// breakpoint) and gdb on the same stub (break + commands silent; continue).
// scripts/bench-guest runs it; BENCHMARKS.md reports it.
//
// The empty entry probe and the return probe are measured -rounds times,
// alternately, and the least of each is reported (the least disturbed by
// whatever else the machine runs), with the ratio of their costs a call
// over native in each round.
//
//	guestbench [-n CALLS] [-native CALLS] [-rounds N] [-calls null,read,write,open]
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gprobes/gprobes/compiler"
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/gdbremote"
	"github.com/gprobes/gprobes/gdbtarget"
	"github.com/gprobes/gprobes/lab/qemulab"
	"github.com/gprobes/gprobes/linuxkernel"
	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/x86"
)

// the probed function of each system call: the entry of its handler
var calls = qemulab.LatencyCalls

func main() {
	n := flag.Int("n", 2000, "system calls per measurement (probed ones cost milliseconds each)")
	nativeN := flag.Int("native", 200000, "system calls per native measurement")
	only := flag.String("calls", "", "comma-separated calls to measure (null,read,write,open; default all)")
	rounds := flag.Int("rounds", 3, "measurements of the empty entry probe and of the return probe, alternately")
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
	if err := run(*n, *nativeN, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "guestbench:", err)
		os.Exit(1)
	}
}

func run(n, nativeN, rounds int) (err error) {
	art, err := qemulab.Artifacts()
	if err != nil {
		return err
	}
	syms := []string{filepath.Join(art, "System.map"), filepath.Join(art, "vmlinux")}
	ctx := context.Background()
	vm, err := qemulab.Boot(ctx, qemulab.Options{})
	if err != nil {
		return err
	}
	defer vm.Kill()
	defer func() {
		if err != nil {
			select {
			case <-vm.Done():
				err = fmt.Errorf("%w\nQEMU exited: %v", err, vm.ExitErr())
			default:
			}
			err = fmt.Errorf("%w\n--- the guest's console ends:\n%s", err, tail(vm.Log(), 40))
		}
	}()
	lat := func(kind string, count int) (float64, error) {
		out, rc, err := vm.Run(fmt.Sprintf("gpwork lat %s %d /etc/gp-a", kind, count), 20*time.Minute)
		if err != nil || rc != 0 {
			return 0, fmt.Errorf("gpwork lat %s: rc %d %v\n%s", kind, rc, err, out)
		}
		return qemulab.ParseLatency(out)
	}
	fmt.Printf("guest: Linux %s under QEMU TCG, 1 vCPU; %d probed calls, %d native\n", vm.KernelRelease(), n, nativeN)
	fmt.Printf("%-6s %12s %14s %14s %14s %14s %14s %14s %14s %10s %10s\n", "call", "native us", "raw stub us", "empty us", "return us", "ret+iv us", "logging us", "+kstack us", "gdb us", "ret/entry", "iv/entry")
	for _, c := range calls {
		native, err := lat(c.Kind, nativeN)
		if err != nil {
			return err
		}
		addr, err := qemulab.Symbol(c.Fn)
		if err != nil {
			return err
		}
		raw, err := rawLoop(vm, addr, func() (float64, error) { return lat(c.Kind, n) })
		if err != nil {
			return fmt.Errorf("raw %s: %w", c.Kind, err)
		}
		var empty, ret, retiv float64
		var ratios []string
		for r := 0; r < max(rounds, 1); r++ {
			e, err := probed(vm, syms, fmt.Sprintf("name = vmlinux\nmodtype = kernel\noffset = %s\nexit 0\n", c.Fn), 0, func() (float64, error) { return lat(c.Kind, n) })
			if err != nil {
				return fmt.Errorf("empty %s: %w", c.Kind, err)
			}
			rt, err := probed(vm, syms, fmt.Sprintf("name = vmlinux\nmodtype = kernel\nretprobe = %s\nexit 0\n", c.Fn), n, func() (float64, error) { return lat(c.Kind, n) })
			if err != nil {
				return fmt.Errorf("return %s: %w", c.Kind, err)
			}
			ri, err := probed(vm, syms, fmt.Sprintf("name = vmlinux\nmodtype = kernel\nvars = 1\noffset = %s\npush ts\npop iv,0\nexit 0\nretprobe = %s\npush ts\npush iv,0\nsub\npop lv,0\nexit 0\n", c.Fn, c.Fn), n, func() (float64, error) { return lat(c.Kind, n) })
			if err != nil {
				return fmt.Errorf("return with iv %s: %w", c.Kind, err)
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
		logging, err := probed(vm, syms, fmt.Sprintf("name = vmlinux\nmodtype = kernel\nvars = 1\noffset = %s\ninc lv,0\npush pid\npush r,rdi\nlog 2\nexit 1\n", c.Fn), n, func() (float64, error) { return lat(c.Kind, n) })
		if err != nil {
			return fmt.Errorf("logging %s: %w", c.Kind, err)
		}
		kstack, err := probed(vm, syms, fmt.Sprintf("name = vmlinux\nmodtype = kernel\nvars = 1\noffset = %s\ninc lv,0\npush pid\npush r,rdi\nlog 2\nlog kstack\nexit 1\n", c.Fn), n, func() (float64, error) { return lat(c.Kind, n) })
		if err != nil {
			return fmt.Errorf("logging with kstack %s: %w", c.Kind, err)
		}
		gdbv, err := gdbLoop(vm, addr, func() (float64, error) { return lat(c.Kind, n/4) })
		if err != nil {
			return fmt.Errorf("gdb %s: %w", c.Kind, err)
		}
		us := func(ns float64) string { return fmt.Sprintf("%.2f", ns/1000) }
		ratio := func(ns float64) string { return fmt.Sprintf("%s (%.0fx)", us(ns), ns/native) }
		// the return probe's cost a call against the entry probe's, both
		// over the native call
		fmt.Printf("%-6s %12s %14s %14s %14s %14s %14s %14s %14s %9.2fx %9.2fx  (rounds: %s)\n", c.Kind, fmt.Sprintf("%.3f", native/1000), ratio(raw), ratio(empty), ratio(ret), ratio(retiv), ratio(logging), ratio(kstack), ratio(gdbv),
			(ret-native)/(empty-native), (retiv-native)/(empty-native), strings.Join(ratios, " "))
	}
	return nil
}

// rawLoop is the floor: a loop on the stub that, at each stop on the
// breakpoint, moves rip past the probed instruction (the 5-byte ftrace nop
// that starts these functions: no step needed) and continues. Two packets
// a hit (P, vCont;c) and the stop: what any handler on this stub pays.
func rawLoop(vm *qemulab.VM, addr uint64, work func() (float64, error)) (float64, error) {
	ctx := context.Background()
	conn, err := gdbremote.Dial(ctx, vm.GDBAddr(), gdbremote.Options{})
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	code := make([]byte, 16)
	if err := conn.ReadMem(addr, code); err != nil {
		return 0, err
	}
	in, err := x86.DecodeKernel(code, addr, 64)
	if err != nil {
		return 0, err
	}
	if in.Class != x86.Emulate || !strings.Contains(in.String(), "nop") {
		return 0, fmt.Errorf("the first instruction at %#x is `%s`, not a nop: the raw loop assumes one", addr, in.String())
	}
	if err := conn.SetBreakpoint(gdbremote.Software, addr, 1); err != nil {
		return 0, err
	}
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		var err error
		defer func() { done <- err }()
		for {
			if err = conn.Continue(nil, 0); err != nil {
				return
			}
			var st gdbremote.Stop
			st, err = conn.Wait(ctx)
			if err != nil {
				return
			}
			select {
			case <-stop:
				return
			default:
			}
			if st.Signal != gdbremote.SigTrap {
				continue
			}
			if err = conn.WriteReg(gdbremote.Thread{}, "rip", addr+uint64(in.Len)); err != nil {
				return
			}
		}
	}()
	v, werr := work()
	close(stop)
	conn.Interrupt()
	if err := <-done; err != nil && werr == nil {
		werr = err
	}
	conn.ClearBreakpoint(gdbremote.Software, addr, 1)
	conn.Detach()
	return v, werr
}

// probed measures work with a gprobes engine on the stub running the DPDF;
// a logging program must commit at least minRecs records.
func probed(vm *qemulab.VM, syms []string, src string, minRecs int, work func() (float64, error)) (float64, error) {
	f, err := dpdf.ParseSource("bench.dpdf", []byte(src), dpdf.Options{NoPreprocessor: true})
	if err != nil {
		return 0, err
	}
	m, err := compiler.Compile(f, rpn.CompileOptions{})
	if err != nil {
		return 0, err
	}
	recs := 0
	var sink uint64
	eng, err := engine.Start(gdbtarget.Open(vm.GDBAddr(), gdbtarget.Options{Options: linuxkernel.Options{Symbols: syms}}), engine.Options{
		Sink: probe.SinkFunc(func(r *probe.Record) {
			recs++
			if len(r.Data) >= 8 {
				sink += binary.LittleEndian.Uint64(r.Data)
			}
		}),
	})
	if err != nil {
		return 0, err
	}
	defer eng.Close()
	if _, err := eng.Insert(m, probe.InsertNew); err != nil {
		return 0, err
	}
	if err := eng.Release(); err != nil {
		return 0, err
	}
	v, err := work()
	if err == nil && strings.Contains(src, "exit 1") && recs < minRecs {
		err = fmt.Errorf("%d records committed for at least %d probed calls", recs, minRecs)
	}
	if err == nil && strings.Contains(src, "retprobe") {
		// every call's return seen, none dropped or missed
		for _, p := range eng.Query() {
			if p.Kind == "retprobe" && (p.Hits < uint64(minRecs) || p.Missed != 0 || p.Dropped != 0) {
				err = fmt.Errorf("return probe: %d returns for at least %d calls, %d missed, %d dropped", p.Hits, minRecs, p.Missed, p.Dropped)
			}
		}
	}
	return v, err
}

// gdbLoop measures work under gdb on the same stub: break + commands
// silent; continue.
func gdbLoop(vm *qemulab.VM, addr uint64, work func() (float64, error)) (float64, error) {
	// GPBENCH READY: connected (the guest stopped), the breakpoint set,
	// the continue next; the work can start then
	script := fmt.Sprintf("set pagination off\nset confirm off\ntarget remote %s\nbreak *%#x\ncommands 1\nsilent\ncontinue\nend\necho GPBENCH READY\\n\ncontinue\n", vm.GDBAddr(), addr)
	dir, err := os.MkdirTemp("", "guestbench-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "gdb.cmd")
	os.WriteFile(path, []byte(script), 0o644)
	cmd := exec.Command("gdb", "-batch", "-nx", "-x", path)
	var gout lockedBuilder
	cmd.Stdout, cmd.Stderr = &gout, &gout
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	for deadline := time.Now().Add(2 * time.Minute); !strings.Contains(gout.String(), "GPBENCH READY"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			return 0, fmt.Errorf("gdb not ready after 2 minutes:\n%s", gout.String())
		}
	}
	v, err := work()
	cmd.Process.Kill()
	cmd.Wait()
	if err != nil {
		err = fmt.Errorf("%w\ngdb said:\n%s", err, gout.String())
	}
	// gdb went away without detaching, and QEMU 7.2 keeps a dead client's
	// breakpoints: the next hit would stop the guest for good. A detach
	// from a fresh connection removes them all and resumes the guest.
	if derr := detachStub(vm); derr != nil && err == nil {
		err = derr
	}
	return v, err
}

// lockedBuilder is a strings.Builder that gdb's output goroutines write
// while this one reads it.
type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func detachStub(vm *qemulab.VM) error {
	conn, err := gdbremote.Dial(context.Background(), vm.GDBAddr(), gdbremote.Options{})
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Detach()
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
