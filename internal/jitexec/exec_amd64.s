//go:build linux && amd64

#include "textflag.h"

// func call(fn, frame, scratch, stack uintptr) uint32
//
// Runs fn with rbp = frame, rbx = scratch and rsp = stack (16-byte
// aligned; the call leaves rsp = 8 mod 16 in fn, as the pad's call
// does). Go's callee-saved state (SP, BP, BX, R12-R15: R14 is g, R15 the
// GOT pointer in dynamic links) is saved at the top of the new stack and
// restored after; everything else is the code's to clobber.
TEXT ·call(SB), NOSPLIT, $0-36
	MOVQ fn+0(FP), AX
	MOVQ frame+8(FP), CX
	MOVQ scratch+16(FP), DX
	MOVQ stack+24(FP), DI
	MOVQ SP, -8(DI)
	MOVQ BP, -16(DI)
	MOVQ BX, -24(DI)
	MOVQ R12, -32(DI)
	MOVQ R13, -40(DI)
	MOVQ R14, -48(DI)
	MOVQ R15, -56(DI)
	LEAQ -64(DI), SP
	MOVQ CX, BP
	MOVQ DX, BX
	CALL AX
	MOVQ 8(SP), R15
	MOVQ 16(SP), R14
	MOVQ 24(SP), R13
	MOVQ 32(SP), R12
	MOVQ 40(SP), BX
	MOVQ 48(SP), BP
	MOVQ 56(SP), SP
	MOVL AX, ret+32(FP)
	RET

// func segments() (cs, ss, ds, es, fs, gs uint16)
TEXT ·segments(SB), NOSPLIT, $0-12
	MOVW CS, AX
	MOVW AX, cs+0(FP)
	MOVW SS, AX
	MOVW AX, ss+2(FP)
	MOVW DS, AX
	MOVW AX, ds+4(FP)
	MOVW ES, AX
	MOVW AX, es+6(FP)
	MOVW FS, AX
	MOVW AX, fs+8(FP)
	MOVW GS, AX
	MOVW AX, gs+10(FP)
	RET

// sigtramp is the SIGSEGV/SIGBUS handler while faults are caught (DI the
// signal, SI the siginfo, DX the ucontext). A fault at a fixup's
// instruction inside the code [codeLo, codeHi) resumes at its handler,
// with every register as the fault left it; anything else goes to the
// handler that was installed before (Go's), as if it had been called
// directly.
TEXT ·sigtramp(SB), NOSPLIT|NOFRAME, $0
	MOVQ 168(DX), AX // uc_mcontext.gregs[REG_RIP]
	MOVQ ·codeLo(SB), CX
	CMPQ AX, CX
	JCS chain
	MOVQ ·codeHi(SB), R8
	CMPQ AX, R8
	JCC chain
	SUBQ CX, AX
	MOVQ ·fixTab(SB), R8
	MOVQ ·fixN(SB), R9
loop:
	TESTQ R9, R9
	JEQ chain
	MOVLQZX 0(R8), R10
	CMPQ R10, AX
	JEQ found
	ADDQ $8, R8
	DECQ R9
	JMP loop
found:
	MOVLQZX 4(R8), R10
	ADDQ CX, R10
	MOVQ R10, 168(DX)
	MOVQ 16(SI), R10 // si_addr
	MOVQ R10, ·lastAddr(SB)
	MOVL DI, ·lastSig(SB)
	LOCK
	INCQ ·caught(SB)
	RET
chain:
	CMPL DI, $7 // SIGBUS
	JEQ bus
	MOVQ ·oldSEGV(SB), AX
	JMP AX
bus:
	MOVQ ·oldBUS(SB), AX
	JMP AX

// sigreturn is the handler's sa_restorer.
TEXT ·sigreturn(SB), NOSPLIT|NOFRAME, $0
	MOVQ $15, AX // rt_sigreturn
	SYSCALL
	INT $3

// func sigtrampAddr() uintptr
TEXT ·sigtrampAddr(SB), NOSPLIT, $0-8
	MOVQ $·sigtramp(SB), AX
	MOVQ AX, ret+0(FP)
	RET

// func sigreturnAddr() uintptr
TEXT ·sigreturnAddr(SB), NOSPLIT, $0-8
	MOVQ $·sigreturn(SB), AX
	MOVQ AX, ret+0(FP)
	RET
