package qemulab

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// readCpio parses a newc archive: name -> (mode, data).
func readCpio(t *testing.T, b []byte) map[string]struct {
	mode uint32
	data []byte
} {
	t.Helper()
	out := map[string]struct {
		mode uint32
		data []byte
	}{}
	off := 0
	align := func() { off = (off + 3) &^ 3 }
	for {
		if off+110 > len(b) || string(b[off:off+6]) != "070701" {
			t.Fatalf("no newc header at %d", off)
		}
		field := func(i int) uint32 {
			v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
			if err != nil {
				t.Fatal(err)
			}
			return uint32(v)
		}
		mode, size, namesize := field(1), field(6), field(11)
		name := string(b[off+110 : off+110+int(namesize)-1])
		off += 110 + int(namesize)
		align()
		data := b[off : off+int(size)]
		off += int(size)
		align()
		if name == "TRAILER!!!" {
			if off != len(b) {
				t.Fatalf("%d bytes after the trailer", len(b)-off)
			}
			return out
		}
		out[name] = struct {
			mode uint32
			data []byte
		}{mode, data}
	}
}

// The archive Options.Files adds, without a VM (runs with -short).
func TestFilesArchive(t *testing.T) {
	dir := t.TempDir()
	host := filepath.Join(dir, "prog")
	os.WriteFile(host, []byte("#!/bin/sh\necho hi\n"), 0o750)
	base := filepath.Join(dir, "base.gz")
	os.WriteFile(base, []byte{0x1f, 0x8b, 1, 2, 3}, 0o644) // 5 bytes: 3 of padding follow
	files := []File{
		{Guest: "/opt/gp/bin/prog", Host: host},
		{Guest: "/etc/x.dpdf", Data: []byte("name = x\n")},
		{Guest: "/opt/gp/empty", Data: []byte{}, Mode: 0o600},
	}
	dst := filepath.Join(dir, "initrd")
	if err := writeInitrd(dst, base, files); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(dst)
	if !bytes.Equal(b[:8], []byte{0x1f, 0x8b, 1, 2, 3, 0, 0, 0}) {
		t.Fatalf("base not copied and zero-padded to 4: % x", b[:8])
	}
	ents := readCpio(t, b[8:])
	want := map[string]uint32{"opt": 0o40755, "opt/gp": 0o40755, "opt/gp/bin": 0o40755,
		"opt/gp/bin/prog": 0o100750, "etc": 0o40755, "etc/x.dpdf": 0o100644, "opt/gp/empty": 0o100600}
	if len(ents) != len(want) {
		t.Errorf("entries %v", ents)
	}
	for name, mode := range want {
		if e, ok := ents[name]; !ok || e.mode != mode {
			t.Errorf("%s: mode %o (present %v), want %o", name, e.mode, ok, mode)
		}
	}
	if string(ents["opt/gp/bin/prog"].data) != "#!/bin/sh\necho hi\n" || string(ents["etc/x.dpdf"].data) != "name = x\n" {
		t.Errorf("contents: %q %q", ents["opt/gp/bin/prog"].data, ents["etc/x.dpdf"].data)
	}
	for _, bad := range [][]File{
		{{Guest: "rel/path", Data: nil}},
		{{Guest: "/a/../b", Data: []byte{}}},
		{{Guest: "/a", Data: []byte{}}, {Guest: "/a", Data: []byte{}}},
		{{Guest: "/a", Data: []byte{}}, {Guest: "/a/b", Data: []byte{}}},
		{{Guest: "/nothing"}},
		{{Guest: "/missing", Host: filepath.Join(dir, "missing")}},
	} {
		if err := writeCpio(new(bytes.Buffer), bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

var probeRe = regexp.MustCompile(`(?m)^EBPFCHECK probe (\S+) load (\S+)ms attach (\S+)ms hits (\d+) own (\d+)(?: ns/call ([0-9.]+))?$`)

// ebpfcheck runs ebpfcheck in the guest and checks that every probe in
// kinds reported want hits (own hits for in-process workloads).
func ebpfcheck(t *testing.T, vm *VM, args string, kinds []string, want int) string {
	t.Helper()
	out, rc, err := vm.Run("ebpfcheck "+args, 5*time.Minute)
	t.Logf("ebpfcheck %s: rc %d\n%s", args, rc, out)
	if err != nil {
		t.Fatal(err)
	}
	if rc != 0 || !strings.Contains(out, "\nEBPFCHECK ok\n") {
		t.Fatalf("ebpfcheck %s failed (rc %d)", args, rc)
	}
	own := !strings.Contains(args, "sh:") // sh:CMD runs in another process: count all hits
	got := map[string]bool{}
	for _, m := range probeRe.FindAllStringSubmatch(out, -1) {
		hits, _ := strconv.Atoi(m[4])
		if own {
			hits, _ = strconv.Atoi(m[5])
		}
		if hits != want {
			t.Errorf("%s: %d hits, want %d", m[1], hits, want)
		}
		got[m[1]] = true
	}
	for _, k := range kinds {
		if !got[k] {
			t.Errorf("no count from probe %s", k)
		}
	}
	return out
}

// TestEBPF proves that eBPF function probes work in the lab guest under
// TCG, independently of gprobes: the static ebpfcheck, added to the guest
// with Options.Files, attaches a kprobe at the entry of __x64_sys_getppid,
// a kprobe inside it (an instruction boundary decoded from /proc/kcore), a
// kretprobe, an fentry and an fexit, and a tracepoint, and counts exactly
// the N getppid calls it makes; a kprobe inside an instruction is refused.
// Then the same five on functions of the lab's modules (dummy, minix,
// rmd160), loaded with modprobe, exercised from user space an exact number
// of times, and unloaded.
func TestEBPF(t *testing.T) {
	t.Parallel()
	Require(t)
	bin := filepath.Join(t.TempDir(), "ebpfcheck")
	t0 := time.Now()
	if err := BuildStatic("github.com/gprobes/gprobes/lab/qemulab/ebpfcheck", bin); err != nil {
		t.Fatal(err)
	}
	t.Logf("static ebpfcheck built in %v", time.Since(t0).Round(time.Millisecond))
	dpdf := "name = lab\nmodtype = kernel\noffset = __x64_sys_getppid\nexit 1\n"
	vm := boot(t, Options{Files: []File{
		{Guest: "/bin/ebpfcheck", Host: bin},
		{Guest: "/root/lab.dpdf", Data: []byte(dpdf)},
	}})
	five := []string{"kprobe", "kprobe-off", "kretprobe", "fentry", "fexit"}

	t.Run("files", func(t *testing.T) {
		if out := run(t, vm, "cat /root/lab.dpdf"); out != dpdf {
			t.Errorf("/root/lab.dpdf: %q", out)
		}
		b, _ := os.ReadFile(bin)
		sum := sha256.Sum256(b)
		out := run(t, vm, "sha256sum /bin/ebpfcheck; ls -l /bin/ebpfcheck")
		if !strings.HasPrefix(out, hex.EncodeToString(sum[:])+" ") || !strings.Contains(out, "-rwxr-xr-x") {
			t.Errorf("/bin/ebpfcheck in the guest differs from the host's (sha256 %x):\n%s", sum, out)
		}
		// what eBPF tools need, mounted by the init
		out = run(t, vm, "mount; ulimit -l; ls /sys/kernel/btf/vmlinux /sys/kernel/tracing/kprobe_events")
		for _, w := range []string{"tracefs on /sys/kernel/tracing", "debugfs on /sys/kernel/debug",
			"bpf on /sys/fs/bpf", "tmpfs on /run", "unlimited"} {
			if !strings.Contains(out, w) {
				t.Errorf("no %q in:\n%s", w, out)
			}
		}
	})

	t.Run("getppid", func(t *testing.T) {
		const n = 20000
		out := ebpfcheck(t, vm, fmt.Sprintf("-n %d -probes kprobe,kprobe-off,kretprobe,fentry,fexit,tracepoint:syscalls/sys_enter_getppid,kprobe-badoff,kprobe-multi", n),
			append(five, "tracepoint:syscalls/sys_enter_getppid"), n)
		if !strings.Contains(out, "EBPFCHECK probe kprobe-badoff refused") {
			t.Error("a kprobe inside an instruction was not refused")
		}
		// the five attached together count the same
		if !regexp.MustCompile(`(?m)^EBPFCHECK all kprobe 20000 kprobe-off 20000 kretprobe 20000 fentry 20000 fexit 20000 `).MatchString(out) {
			t.Error("all at once: counts differ")
		}
		// __x64_sys_getppid is an alias of __do_sys_getppid, the BTF name
		if !strings.Contains(out, "EBPFCHECK fentry target __do_sys_getppid") {
			t.Error("fentry did not go to __do_sys_getppid")
		}
		// the text ebpfcheck decoded from /proc/kcore is the lab's vmlinux,
		// past the 5 bytes ftrace turned from "call __fentry__" into a nop
		var live []byte
		for _, m := range regexp.MustCompile(`(?m)^EBPFCHECK insn \+\d+ ([0-9a-f]+) `).FindAllStringSubmatch(out, -1) {
			b, _ := hex.DecodeString(m[1])
			live = append(live, b...)
		}
		f, err := elf.Open(filepath.Join(vm.Dir(), "vmlinux"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		text := f.Section(".text")
		ondisk := make([]byte, len(live))
		if _, err := text.ReadAt(ondisk, int64(sym(t, "__x64_sys_getppid")-text.Addr)); err != nil {
			t.Fatal(err)
		}
		if len(live) < 6 || !bytes.Equal(live[5:], ondisk[5:]) {
			t.Errorf("live text % x, vmlinux % x", live, ondisk)
		}
		t.Logf("entry: vmlinux % x, live % x", ondisk[:5], live[:5])
	})

	t.Run("modules", func(t *testing.T) {
		run(t, vm, "modprobe dummy && ip link add d0 type dummy")
		// N reads of a statistics file: N calls of the driver's ndo_get_stats64
		ebpfcheck(t, vm, "-fn dummy_get_stats64 -n 50 -work read:/sys/class/net/d0/statistics/rx_packets", five, 50)
		run(t, vm, "modprobe loop && modprobe minix && mount -t minix -o loop /lib/gplab/minix.img /mnt")
		// N statfs calls: N calls of minix_statfs
		ebpfcheck(t, vm, "-fn minix_statfs -n 50 -work statfs:/mnt", five, 50)
		// gpwork hash rmd160 N through AF_ALG: rmd160_final N times, and
		// rmd160_update 3N (one for the data, two inside final: padding, length)
		run(t, vm, "modprobe algif_hash && modprobe rmd160")
		ebpfcheck(t, vm, "-fn rmd160_final -n 20 -work 'sh:gpwork hash rmd160 20'", five, 20)
		ebpfcheck(t, vm, "-fn rmd160_update -n 20 -want 60 -work 'sh:gpwork hash rmd160 20'", five, 60)
		out := run(t, vm, "gpwork hash rmd160 3")
		if !strings.Contains(out, "GPWORK hash rmd160 3 8eb208f7e05d987a9b044a8e98c6b087f15a0bfc\n") {
			t.Errorf("rmd160(\"abc\"):\n%s", out)
		}
		// module BTF comes and goes with the module
		out = run(t, vm, "ls /sys/kernel/btf")
		for _, m := range []string{"dummy", "loop", "minix", "af_alg", "algif_hash", "rmd160", "vmlinux"} {
			if !strings.Contains(out, m+"\n") {
				t.Errorf("no /sys/kernel/btf/%s:\n%s", m, out)
			}
		}
		run(t, vm, "ip link del d0 && umount /mnt && rmmod dummy minix loop algif_hash af_alg rmd160")
		if out := run(t, vm, "lsmod; ls /sys/kernel/btf"); strings.TrimSpace(out) != "Module                  Size  Used by    Not tainted\nvmlinux" {
			t.Errorf("after rmmod:\n%s", out)
		}
	})
}

// TestGprobesInGuest is the recipe of docs/qemu-lab.md for tests that run
// gprobes in the guest (the kernel target's function probes): a static
// gprobes built from this tree, added with Options.Files, runs there; here
// on a process, through ptrace: gpwork's out() runs once per output line.
func TestGprobesInGuest(t *testing.T) {
	t.Parallel()
	Require(t)
	bin := filepath.Join(t.TempDir(), "gprobes")
	t0 := time.Now()
	if err := BuildStatic("github.com/gprobes/gprobes/cmd/gprobes", bin); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(bin)
	t.Logf("static gprobes built in %v, %.1f MB", time.Since(t0).Round(time.Millisecond), float64(st.Size())/1e6)
	// no '#' lines: the guest has no C preprocessor
	dpdf := "name = \"/bin/gpwork\"\nmodtype = user\noffset = out\npush d,7\nlog 1\nexit 1\n"
	vm := boot(t, Options{Files: []File{
		{Guest: "/bin/gprobes", Host: bin},
		{Guest: "/root/out.dpdf", Data: []byte(dpdf)},
	}})
	out := run(t, vm, "gprobes run /root/out.dpdf -- gpwork counts 3")
	t.Logf("\n%s", out)
	if n := strings.Count(out, " log /bin/gpwork(0,0) out "); n != 4 {
		t.Errorf("%d records, want 4 (one per line gpwork prints)", n)
	}
	t.Logf("guest memory with gprobes in it:\n%s", run(t, vm, "free -m"))
}
