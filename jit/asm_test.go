package jit

import (
	"testing"

	"golang.org/x/arch/x86/x86asm"
)

// Every encoder form, decoded back by x86asm: it must be one instruction
// using all the bytes, printing what was meant (Intel syntax).
func TestEncodings(t *testing.T) {
	cases := []struct {
		emit func(a *asm)
		want string
	}{
		{func(a *asm) { a.movRR(true, rax, r13) }, "mov rax, r13"},
		{func(a *asm) { a.movRR(false, r14, rcx) }, "mov r14d, ecx"},
		{func(a *asm) { a.load(true, rax, at(rbp, 40)) }, "mov rax, qword ptr [rbp+0x28]"},
		{func(a *asm) { a.load(true, rax, at(rbp, 0)) }, "mov rax, qword ptr [rbp]"},
		{func(a *asm) { a.load(true, rax, at(r13, 0)) }, "mov rax, qword ptr [r13]"},
		{func(a *asm) { a.load(true, rax, at(rsp, 0)) }, "mov rax, qword ptr [rsp]"},
		{func(a *asm) { a.load(true, rax, at(r12, 8)) }, "mov rax, qword ptr [r12+0x8]"},
		{func(a *asm) { a.load(false, rcx, at(rbx, 0x1040)) }, "mov ecx, dword ptr [rbx+0x1040]"},
		{func(a *asm) { a.load(true, r11, atIdx(rbx, r13, 8, 0x40)) }, "mov r11, qword ptr [rbx+8*r13+0x40]"},
		{func(a *asm) { a.load(true, rax, atIdx(r8, rax, 8, 0)) }, "mov rax, qword ptr [r8+8*rax]"},
		{func(a *asm) { a.load(true, rax, atIdx(rbx, r12, 8, 0x10000)) }, "mov rax, qword ptr [rbx+8*r12+0x10000]"},
		{func(a *asm) { a.load(true, rdi, atIdx(rsi, rcx, 8, 0)) }, "mov rdi, qword ptr [rsi+8*rcx]"},
		{func(a *asm) { a.load(true, rax, atIdx(r13, r10, 8, 0)) }, "mov rax, qword ptr [r13+8*r10]"},
		{func(a *asm) { a.store(true, atIdx(rbx, r14, 1, 0x48), rax) }, "mov qword ptr [rbx+r14+0x48], rax"},
		{func(a *asm) { a.store(false, atIdx(rbx, r14, 1, 0x48), rax) }, "mov dword ptr [rbx+r14+0x48], eax"},
		{func(a *asm) { a.store(true, at(rbx, 0x20), r14) }, "mov qword ptr [rbx+0x20], r14"},
		{func(a *asm) { a.store8(atIdx(rbx, r14, 1, 0x40), rax) }, "mov byte ptr [rbx+r14+0x40], al"},
		{func(a *asm) { a.store8(at(rsi, 0), rsi) }, "mov byte ptr [rsi], sil"},
		{func(a *asm) { a.store8(at(rdx, 0), rdx) }, "mov byte ptr [rdx], dl"},
		{func(a *asm) { a.store16(at(rbx, 4), rax) }, "mov word ptr [rbx+0x4], ax"},
		{func(a *asm) { a.store16(at(rsi, 0), rdi) }, "mov word ptr [rsi], di"},
		{func(a *asm) { a.storeImm(true, at(rbx, 0x48), -1) }, "mov qword ptr [rbx+0x48], -0x1"},
		{func(a *asm) { a.storeImm(true, atIdx(rbx, r13, 8, 0x48), 7) }, "mov qword ptr [rbx+8*r13+0x48], 0x7"},
		{func(a *asm) { a.storeImm(false, at(rbx, 4), 0x20001) }, "mov dword ptr [rbx+0x4], 0x20001"},
		{func(a *asm) { a.store8Imm(at(rbx, 2), 1) }, "mov byte ptr [rbx+0x2], 0x1"},
		{func(a *asm) { a.store16Imm(at(rbx, 6), 0xbeef) }, "mov word ptr [rbx+0x6], -0x4111"},
		{func(a *asm) { a.movImm(rax, 1) }, "mov eax, 0x1"},
		{func(a *asm) { a.movImm(r15, 65535) }, "mov r15d, 0xffff"},
		{func(a *asm) { a.movImm(rcx, 0xffffffffffffff00) }, "mov rcx, -0x100"},
		{func(a *asm) { a.movImm(r9, 0x123456789a) }, "mov r9, 0x123456789a"},
		{func(a *asm) { a.movAbs(rdi, 0x10) }, "mov rdi, 0x10"},
		{func(a *asm) { a.movzx8(rax, at(rsi, 0)) }, "movzx eax, byte ptr [rsi]"},
		{func(a *asm) { a.movzx16(rax, at(rsi, 0)) }, "movzx eax, word ptr [rsi]"},
		{func(a *asm) { a.movzx16R(rax, rax) }, "movzx eax, ax"},
		{func(a *asm) { a.movsxd(rcx, at(rbx, 0x40)) }, "movsxd rcx, dword ptr [rbx+0x40]"},
		{func(a *asm) { a.lea(false, r10, at(r13, -3)) }, "lea r10d, ptr [r13-0x3]"},
		{func(a *asm) { a.lea(true, rdi, atIdx(rbx, r14, 1, 0x40)) }, "lea rdi, ptr [rbx+r14+0x40]"},
		{func(a *asm) { a.lea(true, rsp, atIdx(rsp, r12, 8, 0)) }, "lea rsp, ptr [rsp+8*r12]"},
		{func(a *asm) { a.movFromSreg(rax, sCS) }, "mov eax, cs"},
		{func(a *asm) { a.movFromSreg(rax, sGS) }, "mov eax, gs"},
		{func(a *asm) { a.cmov(condNE, true, rax, rdx) }, "cmovnz rax, rdx"},
		{func(a *asm) { a.cmov(condAE, false, rcx, rdx) }, "cmovnb ecx, edx"},
		{func(a *asm) { a.aluRR(aluAdd, true, rax, rcx) }, "add rax, rcx"},
		{func(a *asm) { a.aluRR(aluXor, false, r14, r14) }, "xor r14d, r14d"},
		{func(a *asm) { a.aluRR(aluCmp, true, rcx, rax) }, "cmp rcx, rax"},
		{func(a *asm) { a.aluRM(aluSub, false, rax, at(rbx, 0x48)) }, "sub eax, dword ptr [rbx+0x48]"},
		{func(a *asm) { a.aluRM(aluAnd, true, rax, at(rsi, 8)) }, "and rax, qword ptr [rsi+0x8]"},
		{func(a *asm) { a.aluMR(aluOr, true, at(rbx, 0x50), rax) }, "or qword ptr [rbx+0x50], rax"},
		{func(a *asm) { a.aluRI(aluSub, false, r15, 1) }, "sub r15d, 0x1"},
		{func(a *asm) { a.aluRI(aluCmp, true, rax, 0xffff) }, "cmp rax, 0xffff"},
		{func(a *asm) { a.aluRI(aluAnd, false, r13, 31) }, "and r13d, 0x1f"},
		{func(a *asm) { a.aluRI(aluCmp, false, r14, 1000) }, "cmp r14d, 0x3e8"},
		{func(a *asm) { a.aluMI(aluCmp, true, at(rdi, 32), 0) }, "cmp qword ptr [rdi+0x20], 0x0"},
		{func(a *asm) { a.aluMI(aluCmp, false, at(rbx, 0x400), 0) }, "cmp dword ptr [rbx+0x400], 0x0"},
		{func(a *asm) { a.aluMI(aluSub, true, atIdx(rbx, r13, 8, 0x40), 1) }, "sub qword ptr [rbx+8*r13+0x40], 0x1"},
		{func(a *asm) { a.lockOr8MI(at(rsi, 0), 0) }, "lock or byte ptr [rsi], 0x0"},
		{func(a *asm) { a.testRR(true, rax, rax) }, "test rax, rax"},
		{func(a *asm) { a.testRR(false, r12, r12) }, "test r12d, r12d"},
		{func(a *asm) { a.test8RI(rcx, 64) }, "test cl, 0x40"},
		{func(a *asm) { a.test8RI(rsi, 1) }, "test sil, 0x1"},
		{func(a *asm) { a.shiftRI(shShr, true, rax, 8) }, "shr rax, 0x8"},
		{func(a *asm) { a.shiftRI(shSar, false, rax, 3) }, "sar eax, 0x3"},
		{func(a *asm) { a.shiftRI(shRol, false, rax, 31) }, "rol eax, 0x1f"},
		{func(a *asm) { a.shiftMI(shShl, true, at(rbx, 0x40), 5) }, "shl qword ptr [rbx+0x40], 0x5"},
		{func(a *asm) { a.shiftMI(shRor, true, at(rbx, 0x40), 5) }, "ror qword ptr [rbx+0x40], 0x5"},
		{func(a *asm) { a.shiftRCL(shShl, true, rax) }, "shl rax, cl"},
		{func(a *asm) { a.shiftRCL(shSar, false, rax) }, "sar eax, cl"},
		{func(a *asm) { a.shiftRCL(shShr, true, rdx) }, "shr rdx, cl"},
		{func(a *asm) { a.shrdCL(true, rax, rdx) }, "shrd rax, rdx, cl"},
		{func(a *asm) { a.imulRR(true, rax, rcx) }, "imul rax, rcx"},
		{func(a *asm) { a.imulRM(false, rax, at(rbx, 0x48)) }, "imul eax, dword ptr [rbx+0x48]"},
		{func(a *asm) { a.imulRRI(false, rcx, rax, -0x61c8864f) }, "imul ecx, eax, -0x61c8864f"},
		{func(a *asm) { a.unaryR(unNot, false, rax) }, "not eax"},
		{func(a *asm) { a.unaryR(unNeg, true, rax) }, "neg rax"},
		{func(a *asm) { a.unaryR(unDiv, true, rcx) }, "div rcx"},
		{func(a *asm) { a.unaryR(unIDiv, true, rcx) }, "idiv rcx"},
		{func(a *asm) { a.unaryM(unMul, true, at(rsi, 16)) }, "mul qword ptr [rsi+0x10]"},
		{func(a *asm) { a.unaryM(unNot, true, at(rbx, 0x40)) }, "not qword ptr [rbx+0x40]"},
		{func(a *asm) { a.unaryM(unNeg, true, atIdx(rbx, r13, 8, 0x40)) }, "neg qword ptr [rbx+8*r13+0x40]"},
		{func(a *asm) { a.incR(false, r14) }, "inc r14d"},
		{func(a *asm) { a.decR(true, rdx) }, "dec rdx"},
		{func(a *asm) { a.lockIncM(true, at(rax, 24)) }, "lock inc qword ptr [rax+0x18]"},
		{func(a *asm) { a.lockIncM(true, atIdx(r8, rax, 8, 0)) }, "lock inc qword ptr [r8+8*rax]"},
		{func(a *asm) { a.lockDecM(true, at(r9, 0x7f8)) }, "lock dec qword ptr [r9+0x7f8]"},
		{func(a *asm) { a.lockXadd(true, at(rdi, 0), rax) }, "lock xadd qword ptr [rdi], rax"},
		{func(a *asm) { a.lockXadd(true, at(rdi, 16), rax) }, "lock xadd qword ptr [rdi+0x10], rax"},
		{func(a *asm) { a.lockCmpxchg(true, atIdx(r8, rsi, 8, 0), rcx) }, "lock cmpxchg qword ptr [r8+8*rsi], rcx"},
		{func(a *asm) { a.ret() }, "ret"},
		{func(a *asm) { a.syscall() }, "syscall"},
		{func(a *asm) { a.rdtsc() }, "rdtsc"},
		{func(a *asm) { a.cld() }, "cld"},
		{func(a *asm) { a.repMovsb() }, "rep movsb byte ptr [rdi], byte ptr [rsi]"},
		{func(a *asm) { a.cqo() }, "cqo"},
		{func(a *asm) { a.ud2() }, "ud2"},
		{func(a *asm) { a.push(rax) }, "push rax"},
		{func(a *asm) { a.pop(r12) }, "pop r12"},
		{func(a *asm) { a.rdfsbase(rax) }, "rdfsbase rax"},
		{func(a *asm) { a.rdgsbase(rax) }, "rdgsbase rax"},
	}
	for _, c := range cases {
		var a asm
		c.emit(&a)
		in, err := x86asm.Decode(a.b, 64)
		if err != nil {
			t.Errorf("% x: %v, want %s", a.b, err, c.want)
			continue
		}
		got := x86asm.IntelSyntax(in, 0, nil)
		if in.Len != len(a.b) || got != c.want {
			t.Errorf("% x: %q (%d of %d bytes), want %q", a.b, got, in.Len, len(a.b), c.want)
		}
	}
}

// Jumps and calls land on their labels, forward and backward.
func TestLabels(t *testing.T) {
	var a asm
	back := a.newLabel()
	fwd := a.newLabel()
	a.bind(back)
	a.jcc(condE, fwd)   // 0: 6 bytes
	a.jmp(back)         // 6: 5 bytes
	a.call(fwd)         // 11: 5 bytes
	a.jcc(condLE, back) // 16
	a.bind(fwd)         // 22
	a.ret()
	if err := a.finish(); err != nil {
		t.Fatal(err)
	}
	want := []string{"jz .+0x10", "jmp .-0xb", "call .+0x6", "jle .-0x16", "ret"}
	for i, off := 0, 0; off < len(a.b); i++ {
		in, err := x86asm.Decode(a.b[off:], 64)
		if err != nil {
			t.Fatal(err)
		}
		if got := x86asm.IntelSyntax(in, 0, nil); got != want[i] {
			t.Errorf("at %d: %s, want %s", off, got, want[i])
		}
		off += in.Len
	}
	var b asm
	l := b.newLabel()
	b.jmp(l)
	if b.finish() == nil {
		t.Error("a jump to an unbound label finished")
	}
}
