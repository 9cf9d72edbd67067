package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/symbols"
)

const packExample = "../../testdata/examples/pack"

// packLab builds the vendor's example (testdata/examples/pack: two builds
// of libgreet.so, one signed pack for both) with this test binary as
// gprobes, and returns its output folder and the gprobes wrapper.
func packLab(t *testing.T) (out, gp string) {
	t.Helper()
	need(t, "make", "cc", "cpp", "ssh-keygen")
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	gp = filepath.Join(dir, "gprobes")
	os.WriteFile(gp, []byte("#!/bin/sh\nGPROBES_TEST_MAIN=1 exec '"+exe+"' \"$@\"\n"), 0o755)
	out = filepath.Join(dir, "out")
	makePack(t, gp, out)
	return out, gp
}

func makePack(t *testing.T, gp, out string, targets ...string) string {
	t.Helper()
	cmd := exec.Command("make", append([]string{"-C", packExample, "GPROBES=" + gp, "O=" + out}, targets...)...)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make: %v\n%s", err, b)
	}
	return string(b)
}

// customer runs the example's customer.sh on pack for program.
func customer(t *testing.T, gp, pack, allowed string, program ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(packExample, "customer.sh"), append([]string{pack, allowed}, program...)...)
	cmd.Env = append(os.Environ(), "GPROBES="+gp)
	b, err := cmd.CombinedOutput()
	return string(b), err
}

var greetRecord = regexp.MustCompile(`(?m)log libgreet\.so\(0,0\) greet 0x[0-9a-f]+ pid \d+ tid \d+ exit 1 data ([1-9])$`)

// TestPackExample: the vendor's flow end to end on processes (docs/ppdf.md,
// "The vendor"):
// make builds two variants of a library and one signed pack for both;
// rebuilt, the pack and its signature are the same bytes; ssh-keygen
// verifies the signature; customer.sh (a daemon that requires packs
// signed by the vendor, one insert) probes each variant's program with the
// build of the pack for the library it loads, every call recorded; a third
// build of the library, not in the pack, is refused with its build ID and
// the pack's two named, and its probe never goes in.
func TestPackExample(t *testing.T) {
	out, gp := packLab(t)
	pack, allowed := filepath.Join(out, "greet.ppdf"), filepath.Join(out, "allowed_signers")
	first, _ := os.ReadFile(pack)
	sig, _ := os.ReadFile(pack + ".sig")
	if !bytes.HasPrefix(sig, []byte("-----BEGIN SSH SIGNATURE-----")) {
		t.Fatalf("no signature beside the pack: %q", sig)
	}
	// identical input, identical bytes: a library newer than the pack
	// (by its time stamp, set a second past the pack's) makes make
	// rebuild it
	st, err := os.Stat(pack)
	if err != nil {
		t.Fatal(err)
	}
	later := st.ModTime().Add(time.Second)
	if err := os.Chtimes(filepath.Join(out, "v1", "libgreet.so"), later, later); err != nil {
		t.Fatal(err)
	}
	if log := makePack(t, gp, out); !strings.Contains(log, "build") {
		t.Fatalf("make did not rebuild the pack after its symbols changed:\n%s", log)
	}
	again, _ := os.ReadFile(pack)
	sigAgain, _ := os.ReadFile(pack + ".sig")
	if !bytes.Equal(first, again) || !bytes.Equal(sig, sigAgain) {
		t.Error("the pack or its signature changed when rebuilt from the same input")
	}
	if d, _ := os.ReadFile(filepath.Join(out, "greet.d")); !strings.Contains(string(d), "v1/libgreet.so") || !strings.Contains(string(d), "v2/libgreet.so") || !strings.Contains(string(d), "vendor_key") {
		t.Errorf("the depfile lacks a build's symbols or the key:\n%s", d)
	}
	// OpenSSH verifies gprobes' signature
	v := exec.Command(testkit.Tool(t, "ssh-keygen"), "-Y", "verify", "-f", allowed, "-I", "vendor@example.com", "-n", "gprobes", "-s", pack+".sig")
	v.Stdin = bytes.NewReader(first)
	if b, err := v.CombinedOutput(); err != nil || !strings.Contains(string(b), "Good") {
		t.Errorf("ssh-keygen -Y verify: %v\n%s", err, b)
	}
	// check and disasm see both builds
	if o := mustRun(t, "check", "--allowed-signers", allowed, pack); !strings.Contains(o, "2 builds") || !strings.Contains(o, "signed by vendor@example.com") || strings.Contains(o, "writes") {
		t.Errorf("check:\n%s", o)
	}
	for _, variant := range []string{"v1", "v2"} {
		o, err := customer(t, gp, pack, allowed, filepath.Join(out, variant, "app"), "3")
		if err != nil {
			t.Fatalf("%s: customer.sh: %v\n%s", variant, err, o)
		}
		var got []string
		for _, m := range greetRecord.FindAllStringSubmatch(o, -1) {
			got = append(got, m[1])
		}
		if strings.Join(got, ",") != "1,2,3" || !strings.Contains(o, "signed by vendor@example.com") {
			t.Errorf("%s: records %q, want greet(1..3):\n%s", variant, got, o)
		}
	}
	// a build the pack does not hold
	makePack(t, gp, out, filepath.Join(out, "v3", "app"))
	ids := regexp.MustCompile(`2 builds \(([0-9a-f]+), ([0-9a-f]+)\)`).FindStringSubmatch(mustRun(t, "check", pack))
	o, err := customer(t, gp, pack, allowed, filepath.Join(out, "v3", "app"), "3")
	if err == nil || ids == nil || !strings.Contains(o, "refused") || !strings.Contains(o, ids[1]+", "+ids[2]) || !strings.Contains(o, "libgreet.so has build ID ") || greetRecord.MatchString(o) {
		t.Errorf("a third build: %v\n%s", err, o)
	}
}

// TestPackRefusals: every reason a pack is refused, through the daemon
// started with --require-signed --allowed-signers (and --revoked-keys,
// --read-only) and through insert --allowed-signers with a daemon that
// trusts anything: the refusal names its reason, and the target (a
// command that would leave a file behind) is never started.
func TestPackRefusals(t *testing.T) {
	out, _ := packLab(t)
	dir := t.TempDir()
	pack, allowed := filepath.Join(out, "greet.ppdf"), filepath.Join(out, "allowed_signers")
	data, _ := os.ReadFile(pack)
	sig, _ := os.ReadFile(pack + ".sig")
	put := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	unsigned := put("unsigned.ppdf", data)
	// tampered as an attacker would: the bytes changed (the source file
	// name in every build) and the checksum made good again, so that only
	// the signature can tell
	tampered := bytes.ReplaceAll(data, []byte("greet.dpdf"), []byte("GREET.dpdf"))
	sum := sha256.Sum256(tampered[:len(tampered)-sha256.Size])
	copy(tampered[len(tampered)-sha256.Size:], sum[:])
	put("tampered.ppdf.sig", sig)
	tamperedPath := put("tampered.ppdf", tampered)
	// a stranger's key signs the same bytes
	stranger := filepath.Join(dir, "stranger")
	if b, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", stranger).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, b)
	}
	strangerPath := put("stranger.ppdf", data)
	if b, err := exec.Command("ssh-keygen", "-Y", "sign", "-f", stranger, "-n", "gprobes", strangerPath).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, b)
	}
	vendorPub, _ := os.ReadFile(filepath.Join(out, "vendor_key.pub"))
	expired := put("expired_signers", []byte(`vendor@example.com valid-before="20200101Z" `+string(vendorPub)))
	revoked := put("revoked", vendorPub)
	writing := put("writes.dpdf", []byte("name = app\nmodtype = user\noffset = main\npush r,rdi\npop r,rdi\nexit 1\n"))
	signedPath := put("signed.ppdf", data)
	put("signed.ppdf.sig", sig)

	marker := filepath.Join(dir, "started")
	target := "exec:/bin/touch " + marker
	started := func() bool { _, err := os.Stat(marker); return err == nil }

	sock := filepath.Join(dir, "strict.sock")
	daemonProcess(t, sock, filepath.Join(dir, "state-strict"), "--require-signed", "--allowed-signers", allowed)
	sockExpired := filepath.Join(dir, "expired.sock")
	daemonProcess(t, sockExpired, filepath.Join(dir, "expired"), "--require-signed", "--allowed-signers", expired)
	sockRevoked := filepath.Join(dir, "revoked.sock")
	daemonProcess(t, sockRevoked, filepath.Join(dir, "state-revoked"), "--require-signed", "--allowed-signers", allowed, "--revoked-keys", revoked)
	sockRO := filepath.Join(dir, "ro.sock")
	daemonProcess(t, sockRO, filepath.Join(dir, "state-ro"), "--read-only")
	sockOpen := filepath.Join(dir, "open.sock")
	daemonProcess(t, sockOpen, filepath.Join(dir, "state-open"))

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"daemon: unsigned", []string{"--socket", sock, unsigned}, "unsigned: the pack has no signature"},
		{"daemon: DPDF source", []string{"--socket", sock, filepath.Join(packExample, "greet.dpdf")}, "unsigned"},
		{"daemon: tampered", []string{"--socket", sock, tamperedPath}, "the signature does not match the pack"},
		{"daemon: unknown signer", []string{"--socket", sock, strangerPath}, "unknown signer"},
		{"daemon: expired", []string{"--socket", sockExpired, signedPath}, "the signer's key has expired"},
		{"daemon: revoked", []string{"--socket", sockRevoked, signedPath}, "the signer's key is revoked"},
		{"daemon: read-only", []string{"--socket", sockRO, writing}, "read-only (--read-only) and the module writes its target: registers (pop r at"},
		{"insert: unsigned", []string{"--socket", sockOpen, "--allowed-signers", allowed, unsigned}, "signature refused"},
		{"insert: tampered", []string{"--socket", sockOpen, "--allowed-signers", allowed, tamperedPath}, "the signature does not match the pack"},
		{"insert: unknown signer", []string{"--socket", sockOpen, "--allowed-signers", allowed, strangerPath}, "unknown signer"},
		{"insert: expired", []string{"--socket", sockOpen, "--allowed-signers", expired, signedPath}, "has expired"},
		{"insert: revoked", []string{"--socket", sockOpen, "--allowed-signers", allowed, "--revoked-keys", revoked, signedPath}, "is revoked"},
		{"insert: DPDF source", []string{"--socket", sockOpen, "--allowed-signers", allowed, writing}, "a DPDF is source, not a signed pack"},
	} {
		o, e, code := gprobes(t, append([]string{"insert", "--target", target}, tc.args...)...)
		if code == 0 || !strings.Contains(e, tc.want) {
			t.Errorf("%s: exit %d, want a refusal with %q:\n%s%s", tc.name, code, tc.want, o, e)
		}
		if started() {
			t.Fatalf("%s: the target was started before the pack was refused", tc.name)
		}
	}
	// run refuses the same way, before the command starts
	if _, e, code := gprobes(t, "run", "--allowed-signers", allowed, tamperedPath, "--", "/bin/touch", marker); code == 0 || !strings.Contains(e, "does not match") || started() {
		t.Errorf("run of a tampered pack: exit %d, started %v: %s", code, started(), e)
	}
	// the bit flipped in transit: the checksum says so before anything
	flipped := bytes.Clone(data)
	flipped[len(flipped)/2] ^= 0x40
	put("flipped.ppdf.sig", sig)
	if _, e, code := gprobes(t, "insert", "--socket", sockOpen, "--target", target, put("flipped.ppdf", flipped)); code == 0 || !strings.Contains(e, "checksum mismatch") || started() {
		t.Errorf("a flipped bit: exit %d: %s", code, e)
	}
	// and the good pack goes in where the bad ones did not
	o, e, code := gprobes(t, "insert", "--socket", sock, "--target", target, "--allowed-signers", allowed, signedPath)
	for end := time.Now().Add(10 * time.Second); !started() && time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(e, "signed by vendor@example.com") || !started() {
		t.Errorf("the signed pack: exit %d, started %v:\n%s%s", code, started(), o, e)
	}
}

// TestWritesShown: check, disasm and query say what a module
// writes in its target, and nothing of the kind for one that only reads.
func TestWritesShown(t *testing.T) {
	dir := t.TempDir()
	hits := buildHits(t)
	writing := filepath.Join(dir, "w.dpdf")
	os.WriteFile(writing, []byte("name = "+filepath.Base(hits)+"\nmodtype = user\noffset = probed\npush r,rdi\npop r,rdi\nexit 1\n"), 0o644)
	if o := mustRun(t, "check", writing); !strings.Contains(o, "writes its target: registers (pop r at "+writing+":5:1)") {
		t.Errorf("check:\n%s", o)
	}
	if o := mustRun(t, "disasm", writing); !strings.HasPrefix(o, "; writes its target: registers (pop r at ") {
		t.Errorf("disasm:\n%s", o)
	}
	if o := mustRun(t, "check", filepath.Join(packExample, "greet.dpdf")); strings.Contains(o, "writes") {
		t.Errorf("check of a reading module:\n%s", o)
	}
	sock, _ := startDaemon(t)
	cmd, _ := startLooping(t, hits)
	mustRun(t, "insert", "--socket", sock, "--target", "pid:"+strconv.Itoa(cmd.Process.Pid), writing)
	o := mustRun(t, "query", "--socket", sock, "--all")
	if !strings.Contains(o, "writes: pid:"+strconv.Itoa(cmd.Process.Pid)+" "+filepath.Base(hits)+" minor 0 probed: registers") {
		t.Errorf("query:\n%s", o)
	}
	if j := mustRun(t, "query", "--socket", sock, "--all", "--json"); !strings.Contains(j, `"writes":"registers"`) {
		t.Errorf("query --json:\n%s", j)
	}
}

// TestPackRunningKernel: on the kernel target a pack is
// bound to the running kernel's build ID (/sys/kernel/notes): one built
// for it (its symbols a copy of the notes) goes in, one built for another
// kernel is refused naming both IDs, and a pack of both builds takes this
// kernel's.
func TestPackRunningKernel(t *testing.T) {
	needKernelBPF(t)
	notes, err := os.ReadFile("/sys/kernel/notes")
	id := symbols.NotesBuildID(notes)
	if err != nil || id == nil {
		testkit.SkipOrFail(t, "this kernel shows no build ID in /sys/kernel/notes: %v", err)
	}
	dir := t.TempDir()
	real := filepath.Join(dir, "notes-this")
	os.WriteFile(real, notes, 0o644)
	fakeID := bytes.Clone(id)
	fakeID[0] ^= 0xff
	other := filepath.Join(dir, "notes-other")
	os.WriteFile(other, bytes.Replace(notes, id, fakeID, 1), 0o644)
	src := filepath.Join(dir, "k.dpdf")
	os.WriteFile(src, []byte("name = vmlinux\nmodtype = kernel\nvars = 1\ntracepoint = syscalls:sys_enter_getppid\ninc lv,0\nexit 0\n"), 0o644)
	this, wrong, both := filepath.Join(dir, "this.ppdf"), filepath.Join(dir, "other.ppdf"), filepath.Join(dir, "both.ppdf")
	mustRun(t, "build", src, "--symbols", real, "-o", this)
	mustRun(t, "build", src, "--symbols", other, "-o", wrong)
	if o := mustRun(t, "build", src, "--for", real, "--for", other, "-o", both); !strings.Contains(o, "2 builds") {
		t.Fatalf("build: %s", o)
	}
	runKernel := func(pack string) (string, string) {
		o, e, code := gprobes(t, "run", "--target", "kernel", pack, "--", "/bin/true")
		if code != 0 {
			t.Fatalf("run %s: exit %d\n%s%s", pack, code, o, e)
		}
		return o, e
	}
	for _, pack := range []string{this, both} {
		if o, e := runKernel(pack); !strings.Contains(o, " active ") && !strings.Contains(o, " gone ") || strings.Contains(o+e, "refused") {
			t.Errorf("%s: the probe did not go in:\n%s%s", filepath.Base(pack), o, e)
		}
	}
	o, e := runKernel(wrong)
	want := fmt.Sprintf("has build ID %x, the pack was built for %x", id, fakeID)
	if !strings.Contains(e, "refused") || !strings.Contains(e, "the running kernel") || !strings.Contains(e, want) {
		t.Errorf("a pack for another kernel: want %q:\n%s%s", want, o, e)
	}
}
