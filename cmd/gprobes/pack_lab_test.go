package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/lab/qemulab"
	"github.com/gprobes/gprobes/symbols"
)

// TestPackGuestKernel (the QEMU lab; docs/ppdf.md, "Packs for customers"): a pack bound to a
// guest kernel's build, its build ID read from guest memory. The guest
// boots with KASLR; the daemon is given System.map alone at insert (no file
// with a build ID), so the ID it compares can only come from the guest's
// notes, read through the GDB stub. A pack built for another build ID is
// refused naming the guest's (that of the lab's vmlinux) and the pack's;
// a pack of two builds, the guest's and another, goes in and counts the
// guest's writes.
func TestPackGuestKernel(t *testing.T) {
	qemulab.Require(t)
	art, err := qemulab.Artifacts()
	if err != nil {
		t.Fatal(err)
	}
	sysmap, vmlinux := filepath.Join(art, "System.map"), filepath.Join(art, "vmlinux")
	vt, err := symbols.Open(vmlinux)
	if err != nil || vt.BuildID() == nil {
		t.Fatalf("the lab's vmlinux has no build ID: %v", err)
	}
	guestID := vt.BuildID()
	dir := t.TempDir()
	// another kernel's build: the same symbols, another build ID
	otherID := bytes.Clone(guestID)
	otherID[0] ^= 0xff
	var notes []byte
	for _, v := range []uint32{4, uint32(len(otherID)), 3} {
		notes = append(notes, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
	}
	notes = append(append(notes, "GNU\x00"...), otherID...)
	otherNotes := filepath.Join(dir, "notes-other")
	os.WriteFile(otherNotes, notes, 0o644)
	src := filepath.Join(dir, "w.dpdf")
	os.WriteFile(src, []byte("name = vmlinux\nmodtype = kernel\nvars = 1\noffset = ksys_write\ninc lv,0\nexit 0\n"), 0o644)
	wrong, both := filepath.Join(dir, "other.ppdf"), filepath.Join(dir, "both.ppdf")
	mustRun(t, "build", src, "--symbols", sysmap, "--symbols", otherNotes, "-o", wrong)
	if o := mustRun(t, "build", src, "--for", sysmap+","+vmlinux, "--for", sysmap+","+otherNotes, "-o", both); !strings.Contains(o, fmt.Sprintf("%x", guestID)) {
		t.Fatalf("build: %s", o)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	vm, err := qemulab.Boot(ctx, qemulab.Options{KASLR: true})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Kill()
	target := "gdb:" + vm.GDBAddr()
	sock, _ := startDaemon(t)

	o, e, code := gprobes(t, "insert", "--socket", sock, "--target", target, "--symbols", sysmap, wrong)
	want := fmt.Sprintf("the guest kernel (vmlinux) has build ID %x, the pack was built for %x", guestID, otherID)
	if code == 0 || !strings.Contains(o+e, "refused") || !strings.Contains(o+e, want) {
		t.Fatalf("a pack for another kernel: exit %d, want %q:\n%s%s", code, want, o, e)
	}
	mustRun(t, "remove", "--socket", sock, "--all")

	mustRun(t, "insert", "--socket", sock, "--target", target, "--symbols", sysmap, both)
	out, rc, err := vm.Run("gpwork counts 5", 3*time.Minute)
	if err != nil || rc != 0 {
		t.Fatalf("gpwork in the guest: rc %d %v\n%s", rc, err, out)
	}
	var q struct {
		Probes []struct {
			State  string
			Hits   uint64
			Reason string
		}
	}
	if err := json.Unmarshal([]byte(mustRun(t, "query", "--socket", sock, "--all", "--json")), &q); err != nil || len(q.Probes) != 1 {
		t.Fatalf("query: %v %+v", err, q)
	}
	if p := q.Probes[0]; p.State != "active" || p.Hits < 5 {
		t.Errorf("the pack of two builds in the guest: %+v", p)
	}
}
