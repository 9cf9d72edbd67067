# Probe targets whose first instructions cover each way the engine runs a
# displaced instruction: emulated (push, test), out of line with a memory
# read (cmpb (%rsi)), RIP-relative (mov counter(%rip)), a relative branch
# and a relative call. Each is a plain function of the SysV ABI.
	.text
	.globl	f_push
	.type	f_push, @function
f_push:				# 3*a, after a push %rbp frame
	push	%rbp
	mov	%rsp, %rbp
	lea	(%rdi,%rdi,2), %rax
	pop	%rbp
	ret
	.size	f_push, .-f_push

	.globl	f_load
	.type	f_load, @function
f_load:				# a + s[0] (a if s is empty)
	cmpb	$0x0, (%rsi)
	je	1f
	movsbq	(%rsi), %rax
	add	%rdi, %rax
	ret
1:	mov	%rdi, %rax
	ret
	.size	f_load, .-f_load

	.globl	f_rip
	.type	f_rip, @function
f_rip:				# ++counter
	mov	counter(%rip), %rax
	add	$1, %rax
	mov	%rax, counter(%rip)
	ret
	.size	f_rip, .-f_rip

	.globl	f_branch
	.type	f_branch, @function
f_branch:			# a ? a+1 : 0
	test	%rdi, %rdi
	jne	2f
	xor	%eax, %eax
	ret
2:	lea	1(%rdi), %rax
	ret
	.size	f_branch, .-f_branch

	.globl	f_call
	.type	f_call, @function
f_call:				# 3*a + 1
	call	f_push
	add	$1, %rax
	ret
	.size	f_call, .-f_call

	.globl	f_boost
	.type	f_boost, @function
f_boost:			# a*a: imul runs out of line and jumps back
	imul	%rdi, %rdi
	mov	%rdi, %rax
	ret
	.size	f_boost, .-f_boost

	.globl	f_step
	.type	f_step, @function
f_step:				# ++counter2: a RIP-relative memory write, single-stepped out of line
	addq	$1, counter2(%rip)
	mov	counter2(%rip), %rax
	ret
	.size	f_step, .-f_step

	.globl	f_icall
	.type	f_icall, @function
f_icall:			# fn(a, s) through a pointer: an indirect call first
	call	*%rdx
	add	$2, %rax
	ret
	.size	f_icall, .-f_icall

	.data
	.globl	counter
counter:
	.quad	0
	.globl	counter2
counter2:
	.quad	0
	.section .note.GNU-stack,"",@progbits
