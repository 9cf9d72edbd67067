package x86

// The native oracle: testdata/harness.c, built with gcc, runs the bytes a
// test gives it on this CPU and reports registers, flags and memory. See
// the comment at the top of harness.c for the areas and the protocol.

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/rpn"
)

const (
	hData    = 0x10000000
	hCode    = 0x20000000
	hFar     = 0x130000000
	hWindow  = 0x400 // test memory: hData .. hData+hWindow
	hIn32    = hData + 0x400
	hOut32   = hData + 0x500
	hMark    = hData + 0x600
	hStack32 = hData + 0xff0
	hReply   = 0x700 // bytes of hData returned with each reply
	hMagic   = 0x6770726f62657831
)

func needAMD64(t testing.TB) {
	t.Helper()
	if runtime.GOARCH != "amd64" || runtime.GOOS != "linux" {
		testkit.SkipOrFail(t, "native oracle needs linux/amd64, this is %s/%s", runtime.GOOS, runtime.GOARCH)
	}
}

// buildC compiles a C file from testdata once per test binary run.
func buildC(t testing.TB, src string, flags ...string) string {
	t.Helper()
	needAMD64(t)
	return testkit.CC(t, src+".bin", append([]string{"-O1", filepath.Join("testdata", src)}, flags...)...)
}

func TestMain(m *testing.M) { testkit.Main(m) }

// chunk is bytes to place at an address in the harness.
type chunk struct {
	addr uint64
	b    []byte
}

type request struct {
	mode   int
	entry  uint64
	regs   Regs
	chunks []chunk
}

type reply struct {
	signo, faultRIP uint64
	regs            Regs // rip is the landing address
	data            [hReply]byte
}

type harness struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	back64 uint64 // 64-bit landing: saves registers and returns
	ret32  uint64 // 64-bit code the 32-bit glue far-jumps back to
}

func startHarness(cmd *exec.Cmd) (*harness, error) {
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &harness{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<16)}, nil
}

func (h *harness) hello(t testing.TB) {
	t.Helper()
	var hello [3]uint64
	if err := binary.Read(h.out, binary.LittleEndian, &hello); err != nil {
		t.Fatalf("harness hello: %v", err)
	}
	if hello[0] != hMagic {
		t.Fatalf("harness hello: bad magic %#x", hello[0])
	}
	h.back64, h.ret32 = hello[1], hello[2]
}

func newHarness(t testing.TB) *harness {
	t.Helper()
	h, err := startHarness(exec.Command(buildC(t, "harness.c")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.in.Close(); h.cmd.Wait() })
	h.hello(t)
	return h
}

// compat32 reports whether the kernel runs 32-bit code in a 64-bit
// process (IA32 emulation can be compiled out or disabled at boot with
// ia32_emulation=0): it runs a nop in the 32-bit code segment.
func (h *harness) compat32(t testing.TB) bool {
	t.Helper()
	s := scenario{mode: 32, entry: hX, code: []chunk{{hX, []byte{0x90}}}, landings: []uint64{hX + 1}}
	s.regs[rpn.RegRSP] = hData + 0x300
	s.regs[rpn.RegRFLAGS] = 0x202
	rep := h.runAll(t, []request{h.request(&s)})
	if rep[0].signo != 0 || rep[0].regs[rpn.RegRIP] != hX+1 {
		t.Logf("this kernel does not run 32-bit code in a 64-bit process (signal %d): 32-bit cases skipped", rep[0].signo)
		return false
	}
	return true
}

func encodeRequest(w io.Writer, r *request) error {
	var b []byte
	b = binary.LittleEndian.AppendUint32(b, uint32(r.mode))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(r.chunks)))
	b = binary.LittleEndian.AppendUint64(b, r.entry)
	for i := 0; i < 18; i++ {
		b = binary.LittleEndian.AppendUint64(b, r.regs[i])
	}
	for _, c := range r.chunks {
		b = binary.LittleEndian.AppendUint64(b, c.addr)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(c.b)))
		b = append(b, c.b...)
	}
	_, err := w.Write(b)
	return err
}

// runAll sends every request and returns the replies in order.
func (h *harness) runAll(t testing.TB, reqs []request) []reply {
	t.Helper()
	out, err := h.runAllErr(reqs)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// runAllErr is runAll for goroutines that may not call t.Fatal.
func (h *harness) runAllErr(reqs []request) ([]reply, error) {
	errc := make(chan error, 1)
	go func() {
		w := bufio.NewWriterSize(h.in, 1<<16)
		for i := range reqs {
			if err := encodeRequest(w, &reqs[i]); err != nil {
				errc <- err
				return
			}
		}
		errc <- w.Flush()
	}()
	out := make([]reply, len(reqs))
	for i := range out {
		var hdr [20]uint64
		if err := binary.Read(h.out, binary.LittleEndian, &hdr); err != nil {
			return nil, fmt.Errorf("harness reply %d: %v (it died running request %d)", i, err, i)
		}
		out[i].signo, out[i].faultRIP = hdr[0], hdr[1]
		copy(out[i].regs[:18], hdr[2:])
		if _, err := io.ReadFull(h.out, out[i].data[:]); err != nil {
			return nil, fmt.Errorf("harness reply %d: %v", i, err)
		}
		mark := uint64(binary.LittleEndian.Uint32(out[i].data[hMark-hData:]))
		if reqs[i].mode == 32 {
			for r := 0; r < 8; r++ {
				out[i].regs[r] = uint64(binary.LittleEndian.Uint32(out[i].data[hOut32-hData+8*r:]))
			}
			out[i].regs[rpn.RegRFLAGS] = uint64(binary.LittleEndian.Uint32(out[i].data[hOut32-hData+8*17:]))
		}
		out[i].regs[rpn.RegRIP] = markAddr(mark)
	}
	if err := <-errc; err != nil {
		return nil, fmt.Errorf("writing requests: %v", err)
	}
	return out, nil
}

// markAddr turns the 32-bit landing mark back into an address.
func markAddr(m uint64) uint64 {
	if m>>28 == hFar>>28&0xf {
		return hFar&^0xffffffff | m
	}
	return m
}

// landing64 is the stub placed where a 64-bit test may end: it records its
// own address and jumps to the harness, changing no register or flag.
func (h *harness) landing64(at uint64) []byte {
	b := []byte{0xc7, 0x04, 0x25}
	b = binary.LittleEndian.AppendUint32(b, hMark)
	b = binary.LittleEndian.AppendUint32(b, uint32(at))
	b = append(b, 0xff, 0x25, 0, 0, 0, 0)
	return binary.LittleEndian.AppendUint64(b, h.back64)
}

// 32-bit glue. The loader sits at hCode, the far jump back to 64-bit mode
// at hCode+0x80.
const (
	hLoader32 = hCode
	hBack32   = hCode + 0x80
)

// loader32 loads the registers from hIn32 and jumps to x.
func loader32(x uint64) []byte {
	b := []byte{0xbc}
	b = binary.LittleEndian.AppendUint32(b, hStack32) // mov $stack, %esp
	// 64-bit Linux leaves ds and es null, which faults in compatibility
	// mode: load the flat user data segment.
	b = append(b, 0x6a, 0x2b, 0x1f, 0x6a, 0x2b, 0x07) // push $0x2b; pop %ds; push $0x2b; pop %es
	b = append(b, 0xff, 0x35)
	b = binary.LittleEndian.AppendUint32(b, hIn32+8*17) // pushl eflags
	b = append(b, 0x9d)                                 // popfl
	for _, r := range []struct {
		modrm byte
		slot  int
	}{{0x1d, 1}, {0x0d, 2}, {0x15, 3}, {0x35, 4}, {0x3d, 5}, {0x2d, 6}, {0x25, 7}} {
		b = append(b, 0x8b, r.modrm)
		b = binary.LittleEndian.AppendUint32(b, uint32(hIn32+8*r.slot))
	}
	b = append(b, 0xa1)
	b = binary.LittleEndian.AppendUint32(b, hIn32) // mov eax
	b = append(b, 0xe9)
	return binary.LittleEndian.AppendUint32(b, uint32(x-(hLoader32+uint64(len(b))+4)))
}

// landing32 saves the 32-bit registers to hOut32, records its address and
// far-jumps back to 64-bit mode.
func landing32(at uint64) []byte {
	b := []byte{0xc7, 0x05}
	b = binary.LittleEndian.AppendUint32(b, hMark)
	b = binary.LittleEndian.AppendUint32(b, uint32(at))
	b = append(b, 0xa3)
	b = binary.LittleEndian.AppendUint32(b, hOut32)
	for _, r := range []struct {
		modrm byte
		slot  int
	}{{0x1d, 1}, {0x0d, 2}, {0x15, 3}, {0x35, 4}, {0x3d, 5}, {0x2d, 6}, {0x25, 7}} {
		b = append(b, 0x89, r.modrm)
		b = binary.LittleEndian.AppendUint32(b, uint32(hOut32+8*r.slot))
	}
	b = append(b, 0xbc)
	b = binary.LittleEndian.AppendUint32(b, hStack32)
	b = append(b, 0x9c, 0x8f, 0x05) // pushfl; popl
	b = binary.LittleEndian.AppendUint32(b, hOut32+8*17)
	b = append(b, 0xea)
	b = binary.LittleEndian.AppendUint32(b, hBack32)
	return append(b, 0x33, 0x00)
}

func (h *harness) back32() []byte {
	return binary.LittleEndian.AppendUint64([]byte{0xff, 0x25, 0, 0, 0, 0}, h.ret32)
}

// scenario is one native run: code at addresses, entry, registers,
// memory window; landings lists every address the run may end at.
type scenario struct {
	mode     int
	entry    uint64
	regs     Regs
	window   [hWindow]byte
	code     []chunk
	landings []uint64
}

func (h *harness) request(s *scenario) request {
	r := request{mode: s.mode, entry: s.entry, regs: s.regs}
	r.chunks = append(r.chunks, chunk{hData, append([]byte(nil), s.window[:]...)})
	if s.mode == 32 {
		var in [18 * 8]byte
		for i := 0; i < 18; i++ {
			binary.LittleEndian.PutUint64(in[8*i:], s.regs[i]&0xffffffff)
		}
		r.chunks = append(r.chunks, chunk{hIn32, in[:]},
			chunk{hLoader32, loader32(s.entry)}, chunk{hBack32, h.back32()})
		r.entry = hLoader32
		for _, l := range s.landings {
			r.chunks = append(r.chunks, chunk{l, landing32(l)})
		}
	} else {
		for _, l := range s.landings {
			r.chunks = append(r.chunks, chunk{l, h.landing64(l)})
		}
	}
	r.chunks = append(r.chunks, s.code...) // code last: it wins over landings
	return r
}

// testMem is the emulator's view of a scenario: the window and the code
// chunks are readable, the window writable; everything else faults (as it
// does natively, as long as tests keep addresses out of the rest of the
// harness's areas).
type testMem struct {
	window *[hWindow]byte
	code   []chunk
	reads  int
	writes int
}

func (m *testMem) find(addr uint64, n int, write bool) []byte {
	if addr >= hData && addr+uint64(n) <= hData+hWindow && addr+uint64(n) > addr {
		return m.window[addr-hData : addr-hData+uint64(n)]
	}
	if write {
		return nil
	}
	for _, c := range m.code {
		if addr >= c.addr && addr+uint64(n) <= c.addr+uint64(len(c.b)) && addr+uint64(n) > addr {
			return c.b[addr-c.addr : addr-c.addr+uint64(n)]
		}
	}
	return nil
}

func (m *testMem) Read(addr uint64, p []byte) bool {
	m.reads++
	b := m.find(addr, len(p), false)
	if b == nil {
		return false
	}
	copy(p, b)
	return true
}

func (m *testMem) Write(addr uint64, p []byte) bool {
	m.writes++
	b := m.find(addr, len(p), true)
	if b == nil {
		return false
	}
	copy(b, p)
	return true
}

var regNames = [18]string{"rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp",
	"r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip", "rflags"}

// diffRegs lists the registers that differ, for the first 18 registers
// (32-bit mode compares the low halves of eax..esp, eip and eflags).
func diffRegs(mode int, want, got *Regs) string {
	s := ""
	for i := 0; i < 18; i++ {
		w, g := want[i], got[i]
		if mode == 32 {
			if i >= 8 && i < 16 {
				continue
			}
			w, g = w&0xffffffff, g&0xffffffff
		}
		if w != g {
			s += fmt.Sprintf(" %s: cpu %#x emulator %#x;", regNames[i], w, g)
		}
	}
	return s
}
