package xenlab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/lab/labkit"
)

// step runs f and logs how long it took.
func step(t *testing.T, name string, f func()) {
	t.Helper()
	start := time.Now()
	f()
	t.Logf("step %-32s %6.2fs", name, time.Since(start).Seconds())
}

func TestXenLab(t *testing.T) {
	Require(t)
	var dir string
	step(t, "artifacts (build.sh)", func() {
		var err error
		if dir, err = Artifacts(); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("artifacts in %s", dir)

	// an extra file for dom0, to exercise Options.Extra
	extra := filepath.Join(t.TempDir(), "hello")
	if err := os.WriteFile(extra, []byte("#!/bin/sh\necho hello from the extra archive \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var vm *VM
	logPath := filepath.Join(t.TempDir(), "serial.log")
	step(t, "boot (dom0 + 2 domUs)", func() {
		var err error
		vm, err = Boot(ctx, Options{
			DomUs:   2,
			Extra:   map[string]string{"/usr/local/bin/hello": extra},
			LogPath: logPath,
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	defer vm.Kill()
	defer func() {
		if t.Failed() {
			t.Logf("serial log:\n%s", labkit.Tail(vm.Log(), 150))
		}
	}()
	tm := vm.Timings()
	t.Logf("boot milestones: dom0 init %.1fs, dom0 ready %.1fs, domUs created %.1fs, domUs ready %.1fs",
		tm.Dom0Booted.Seconds(), tm.Dom0Ready.Seconds(), tm.DomUsCreated.Seconds(), tm.DomUsReady.Seconds())

	run := func(cmd string, timeout time.Duration) string {
		t.Helper()
		var out string
		step(t, "dom0: "+cmd, func() {
			var rc int
			var err error
			out, rc, err = vm.Run(cmd, timeout)
			if err != nil {
				t.Fatal(err)
			}
			if rc != 0 {
				t.Fatalf("%s: status %d:\n%s", cmd, rc, out)
			}
		})
		return out
	}

	out := run("hello world", 30*time.Second)
	if out != "hello from the extra archive world\n" {
		t.Errorf("extra file: got %q", out)
	}
	out = run("xl list", 60*time.Second)
	t.Logf("xl list:\n%s", out)
	ids := map[string]int{}
	for _, name := range []string{"domu1", "domu2"} {
		id := vm.DomID(name)
		if id <= 0 {
			t.Fatalf("DomID(%s) = %d", name, id)
		}
		ids[name] = id
		if !regexp.MustCompile(`(?m)^` + name + `\s+` + fmt.Sprint(id) + `\s`).MatchString(out) {
			t.Errorf("xl list does not show %s with domid %d", name, id)
		}
	}
	if !regexp.MustCompile(`(?m)^Domain-0\s+0\s`).MatchString(out) {
		t.Errorf("xl list does not show Domain-0")
	}

	// exit status and output framing through dom0
	step(t, "dom0: exit status", func() {
		out, rc, err := vm.Run(`echo "it's"; echo err >&2; exit 7`, 30*time.Second)
		if err != nil || rc != 7 || out != "it's\nerr\n" {
			t.Errorf("got %q rc %d err %v", out, rc, err)
		}
	})

	// a long command line (typed in paced chunks) and a long output
	step(t, "dom0: long command, long output", func() {
		long := strings.Repeat("x", 600) // past Xen's 128-byte serial input buffer
		out, rc, err := vm.Run("echo "+long+" | wc -c; seq 1 3000 | md5sum", 60*time.Second)
		if err != nil || rc != 0 {
			t.Fatalf("rc %d err %v out %q", rc, err, out)
		}
		out2, _, err := vm.Run("seq 1 3000", 60*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(out2), "\n")
		if !strings.HasPrefix(out, "601\n") || len(lines) != 3000 || lines[2999] != "3000" {
			t.Errorf("got %q and %d lines", out, len(lines))
		}
	})
	step(t, "domu1: long output", func() {
		out, rc, err := vm.RunDomU("domu1", "seq 1 2000", 60*time.Second)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if err != nil || rc != 0 || len(lines) != 2000 || lines[1999] != "2000" {
			t.Errorf("rc %d err %v, %d lines", rc, err, len(lines))
		}
	})

	for _, name := range []string{"domu1", "domu2"} {
		step(t, name+": gpwork counts 3", func() {
			out, rc, err := vm.RunDomU(name, "gpwork counts 3", 60*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s gpwork counts 3 (rc %d):\n%s", name, rc, out)
			if rc != 0 {
				t.Fatalf("status %d", rc)
			}
			for _, re := range []string{
				`(?m)^GPWORK pid \d+$`,
				`(?m)^GPWORK done getppid 3 read 3 write 3 open 6$`,
				`(?m)^GPWORK opened /etc/gp-a 3$`,
				`(?m)^GPWORK opened /etc/gp-b 3$`,
			} {
				if !regexp.MustCompile(re).MatchString(out) {
					t.Errorf("no %s in the output", re)
				}
			}
		})
		step(t, name+": hostname, status, quoting", func() {
			out, rc, err := vm.RunDomU(name, `hostname; echo "a 'b' c"; exit 3`, 60*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if rc != 3 || out != name+"\na 'b' c\n" {
				t.Errorf("got %q rc %d", out, rc)
			}
		})
	}

	// gdbsx: the rebuilt hypervisor has CONFIG_GDBSX, so gdbsx can attach
	// (stock Debian Xen answers "Hyp is NOT enabled for gdbsx").
	step(t, "gdbsx attach to domu2", func() {
		// gdbsx's stdout is a file here, so block-buffered: judge by the
		// listening socket, and by its errors (stderr).
		cmd := fmt.Sprintf("gdbsx -a %d 64 9999 >/tmp/gdbsx.log 2>&1 & p=$!; ", ids["domu2"]) +
			labkit.Wait{What: "gdbsx to listen on port 9999", Cond: "netstat -ltn | grep -q ':9999 '", Show: "cat /tmp/gdbsx.log", Pid: "$p"}.Cmd() +
			"; netstat -ltn | grep ':9999 '; kill $p; wait $p; cat /tmp/gdbsx.log; true"
		out, _, err := vm.Run(cmd, 4*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("gdbsx:\n%s", out)
		if !strings.Contains(out, "LISTEN") || strings.Contains(out, "NOT enabled") {
			t.Errorf("gdbsx did not attach and listen:\n%s", out)
		}
	})
	out = run("xl info | grep -E 'xen_version|xen_commandline|nr_cpus|total_memory|free_memory'", 30*time.Second)
	t.Logf("xl info:\n%s", out)

	step(t, "destroy domu2", func() {
		if err := vm.DestroyDomU("domu2"); err != nil {
			t.Fatal(err)
		}
	})
	out = run("xl list", 60*time.Second)
	if strings.Contains(out, "domu2") {
		t.Errorf("domu2 still listed after xl destroy:\n%s", out)
	}
	if !strings.Contains(out, "domu1") {
		t.Errorf("domu1 gone too:\n%s", out)
	}
	if vm.DomID("domu2") != -1 {
		t.Errorf("DomID(domu2) after destroy = %d", vm.DomID("domu2"))
	}
	step(t, "domu1 still answers", func() {
		out, rc, err := vm.RunDomU("domu1", "gpwork counts 1", 60*time.Second)
		if err != nil || rc != 0 || !strings.Contains(out, "GPWORK done getppid 1") {
			t.Errorf("got %q rc %d err %v", out, rc, err)
		}
	})
	t.Logf("command lines typed again into dom0: %d", vm.Retries())
	step(t, "poweroff", func() {
		if err := vm.PowerOff(60 * time.Second); err != nil {
			t.Error(err)
		}
	})
}

func TestCollect(t *testing.T) {
	lines := []string{
		"XLAB t O one",
		"(XEN) unrelated",
		"XLAB t O tw(XEN) spliced message",
		"o",
		"XLAB t O ",
		"XLAB u O other tag",
		"XLAB t O (XEN) xl dmesg line",
		"XLAB t O",
	}
	out, n := collect(lines, "XLAB t O")
	if want := "one\ntwo\n\n(XEN) xl dmesg line\n\n"; out != want || n != 5 {
		t.Errorf("got %q (%d lines), want %q", out, n, want)
	}
}
