package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/lab/qemulab"
)

// A guest kernel probed through the commands with no --symbols (KASLR
// on): insert says where the guest's symbols and types came from (its
// memory), status says it again with the kernel's version and build ID,
// and the probe, by function name and reading task_struct.comm at the
// offset of the guest's own BTF, logs exactly the workload's calls.
func TestGuestNoSymbolsCommands(t *testing.T) {
	qemulab.Require(t)
	t.Setenv("GPROBES_KERNEL_CACHE", t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	vm, err := qemulab.Boot(ctx, qemulab.Options{KASLR: true})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Kill()
	target := "gdb:" + vm.GDBAddr()
	probe := filepath.Join(t.TempDir(), "getppid.dpdf")
	os.WriteFile(probe, []byte(`name = vmlinux
modtype = kernel
offset = __x64_sys_getppid
push d,16
push task
push d,offsetof(struct task_struct, comm)
add
log str
exit 1
`), 0o644)
	sock, _ := startDaemon(t)
	out, errs, code := gprobes(t, "insert", "--socket", sock, "--target", target, probe)
	if code != 0 {
		t.Fatalf("insert: exit %d\n%s%s", code, out, errs)
	}
	for _, want := range []string{"guest kernel Linux version 6.1.0", "build ID ", "symbols: kallsyms in guest memory", "types: BTF in guest memory"} {
		if !strings.Contains(errs, want) {
			t.Errorf("insert said %q, want %q in it", errs, want)
		}
	}
	status := mustRun(t, "status", "--socket", sock)
	t.Logf("insert said: %sstatus said:\n%s", errs, status)
	if !regexp.MustCompile(`target ` + regexp.QuoteMeta(target) + `: running; guest kernel Linux version 6\.1\.0-\S+; build ID [0-9a-f]{40}; KASLR slide 0x[0-9a-f]+; symbols: kallsyms in guest memory`).MatchString(status) {
		t.Errorf("status:\n%s", status)
	}
	res, rc, err := vm.Run("gpwork counts 3", 3*time.Minute)
	if err != nil || rc != 0 {
		t.Fatalf("gpwork: rc %d %v\n%s", rc, err, res)
	}
	m := regexp.MustCompile(`GPWORK pid (\d+)`).FindStringSubmatch(res)
	if m == nil {
		t.Fatalf("no pid in %q", res)
	}
	var pid int
	fmt.Sscan(m[1], &pid)
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(mustRun(t, "log", "--socket", sock, "--json")), "\n") {
		var rec struct {
			Pid  int
			Data string
		}
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if rec.Pid == pid && strings.HasPrefix(rec.Data, fmt.Sprintf("%x", "gpwork")) {
			n++
		}
	}
	if n != 3 {
		t.Errorf("getppid by gpwork (pid %d): %d records, want 3", pid, n)
	}
}
