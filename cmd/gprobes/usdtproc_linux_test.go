package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/ptrace"
)

// TestDaemonUSDTProcessKilled: a usdt probe behind a semaphore inserted
// into a running process (pid:) through the daemon counts the semaphore
// up; the daemon killed with SIGKILL, its guard (first way) or `gprobes
// recover` (second way: the guard killed first, and nothing else puts it
// back meanwhile) counts it down again from the process's journal, and
// the program skips the guarded code as before the insert.
func TestDaemonUSDTProcessKilled(t *testing.T) {
	testkit.NeedSDT(t)
	exe := testkit.CC(t, "usdtprog", "-O1", "../../kernel/testdata/usdtprog.c", "../../kernel/testdata/usdtguard.c")
	for _, how := range []string{"guard", "recover"} {
		t.Run(how, func(t *testing.T) {
			p := startUSDTProg(t, exe)
			dir := t.TempDir()
			sock, d := harmDaemon(t, dir)
			mustRun(t, "insert", "--socket", sock, "--target", fmt.Sprintf("pid:%d", p.cmd.Process.Pid), "-e",
				fmt.Sprintf("name = %s; modtype = user; vars = 1; usdt = app:guarded; inc lv,0; push arg,1; log 1; exit 1", exe))
			if s := p.semaphore(exe); s != 1 {
				t.Fatalf("the semaphore is %d with the probe in, want 1", s)
			}
			guard := guardOf(t, d.Process.Pid)
			if how == "recover" {
				killDead(t, guard)
			}
			d.Process.Kill()
			d.Wait()
			if how == "guard" {
				waitFor(t, func() bool { return p.semaphore(exe) == 0 }, "the guard to count the semaphore down")
			} else {
				if s := p.semaphore(exe); s != 1 {
					t.Fatalf("the semaphore is %d with no guard and no recover yet: the test proves nothing", s)
				}
				mustRun(t, "recover")
				if s := p.semaphore(exe); s != 0 {
					t.Fatalf("the semaphore is %d after gprobes recover, want 0", s)
				}
			}
			if e := p.rounds(4); e != 0 {
				t.Errorf("app:guarded enabled in %d rounds after the recovery", e)
			}
		})
	}
}

// usdtProgProc is a running usdtprog.
type usdtProgProc struct {
	t   *testing.T
	cmd *exec.Cmd
	in  io.Writer
	out *bufio.Reader
}

func startUSDTProg(t *testing.T, exe string) *usdtProgProc {
	t.Helper()
	cmd := exec.Command(exe)
	in, _ := cmd.StdinPipe()
	outp, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	p := &usdtProgProc{t: t, cmd: cmd, in: in, out: bufio.NewReader(outp)}
	if l, err := p.out.ReadString('\n'); err != nil || l != "ready\n" {
		t.Fatalf("usdtprog: %q %v", l, err)
	}
	return p
}

func (p *usdtProgProc) rounds(n int) int {
	p.t.Helper()
	fmt.Fprintf(p.in, "%d\n", n)
	l, err := p.out.ReadString('\n')
	var got, enabled int
	if _, e := fmt.Sscanf(l, "done %d enabled %d", &got, &enabled); err != nil || e != nil || got != n {
		p.t.Fatalf("usdtprog after %d rounds: %q %v", n, l, err)
	}
	return enabled
}

// semaphore reads app_guarded_semaphore in the process (its symbol's
// address plus the PIE's load address).
func (p *usdtProgProc) semaphore(exe string) uint16 {
	p.t.Helper()
	out, err := exec.Command("nm", exe).Output()
	if err != nil {
		p.t.Fatal(err)
	}
	var sym uint64
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[2] == "app_guarded_semaphore" {
			fmt.Sscanf(f[0], "%x", &sym)
		}
	}
	pid := p.cmd.Process.Pid
	maps, err := ptrace.Maps(pid)
	if err != nil || sym == 0 {
		p.t.Fatalf("semaphore symbol %#x, maps: %v", sym, err)
	}
	base := ^uint64(0)
	for _, m := range maps {
		if m.Path == exe && m.Start < base {
			base = m.Start
		}
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		p.t.Fatal(err)
	}
	defer f.Close()
	var b [2]byte
	if _, err := f.ReadAt(b[:], int64(base+sym)); err != nil {
		p.t.Fatal(err)
	}
	return binary.LittleEndian.Uint16(b[:])
}
