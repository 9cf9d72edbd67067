// Code entered in the middle of what a jump pad's jump would cover
// (ptrace/entries_test.go). Each function's probe point is named in a
// comment; the jump there covers 5 or 6 bytes, and something else enters
// them at the second instruction.

	.text

// t_body(a, b) = a + 2b. t_tail(a, b) = a + 3b, by jumping into
// t_body's second instruction (as glibc's __mempcpy_*_erms does into
// __memmove_*_erms). Probe: t_body.
	.globl	t_body
	.type	t_body, @function
t_body:
	mov	%rdi, %rax		// 3 bytes
.Lt_mid:
	add	%rsi, %rax		// 3 bytes
	add	%rsi, %rax
	ret
	.size	t_body, .-t_body

	.globl	t_tail
	.type	t_tail, @function
t_tail:
	mov	%rdi, %rax
	add	%rsi, %rax
	jmp	.Lt_mid
	.size	t_tail, .-t_tail

// c_func(x) = x + 3 for x >= 0, -x + 3 through its cold part, which
// jumps back into the hot part (gcc's .cold parts do). Probe: c_func+8.
	.globl	c_func
	.type	c_func, @function
c_func:
	test	%edi, %edi		// 2 bytes
	js	c_func.cold		// 6 bytes
	mov	%edi, %eax		// 2 bytes: c_func+8
.Lc_back:
	add	$3, %eax		// 3 bytes
	ret
	.size	c_func, .-c_func

	.section .text.unlikely,"ax",@progbits
	.type	c_func.cold, @function
c_func.cold:
	mov	%edi, %eax
	neg	%eax
	jmp	.Lc_back
	.size	c_func.cold, .-c_func.cold
	.text

// lp_func(x) = thrower(x) + 1; when thrower throws, the landing pad (a
// cleanup) counts the exception in lp_cleanups and the unwinding goes
// on. The pad is also the normal path's next instruction: the
// instruction before it (mov $1,%bl) and the pad's first (mov %rax,%rdi)
// are what a jump at the probe covers. Probe: lp_func+8.
	.globl	lp_func
	.type	lp_func, @function
lp_func:
	.cfi_startproc
	.cfi_personality 0x9b, DW.ref.__gxx_personality_v0
	.cfi_lsda 0x1b, .LLSDA_lp
	push	%rbx
	.cfi_def_cfa_offset 16
	.cfi_offset %rbx, -16
	xor	%ebx, %ebx
.Llp_call:
	call	thrower@PLT
.Llp_callend:
	mov	$1, %bl			// 2 bytes: lp_func+8
.Llp_pad:
	mov	%rax, %rdi		// 3 bytes
	test	%ebx, %ebx
	jz	.Llp_unwind
	lea	1(%rdi), %eax
	pop	%rbx
	.cfi_remember_state
	.cfi_def_cfa_offset 8
	ret
.Llp_unwind:
	.cfi_restore_state
	lock incl lp_cleanups(%rip)
.Llp_resume:
	call	_Unwind_Resume@PLT
.Llp_resumeend:
	.cfi_endproc
	.size	lp_func, .-lp_func

	.section .gcc_except_table,"a",@progbits
.LLSDA_lp:
	.byte	0xff			// landing pads relative to the function
	.byte	0xff			// no type table
	.byte	0x1			// call sites in uleb128
	.uleb128 .LLSDA_cs_end-.LLSDA_cs
.LLSDA_cs:
	.uleb128 .Llp_call-lp_func
	.uleb128 .Llp_callend-.Llp_call
	.uleb128 .Llp_pad-lp_func
	.uleb128 0			// a cleanup
	.uleb128 .Llp_resume-lp_func	// the unwinding goes on: no pad
	.uleb128 .Llp_resumeend-.Llp_resume
	.uleb128 0
	.uleb128 0
.LLSDA_cs_end:

	.hidden	DW.ref.__gxx_personality_v0
	.weak	DW.ref.__gxx_personality_v0
	.section .data.rel.local.DW.ref.__gxx_personality_v0,"awG",@progbits,DW.ref.__gxx_personality_v0,comdat
	.align	8
	.type	DW.ref.__gxx_personality_v0, @object
	.size	DW.ref.__gxx_personality_v0, 8
DW.ref.__gxx_personality_v0:
	.quad	__gxx_personality_v0

	.section .note.GNU-stack,"",@progbits
