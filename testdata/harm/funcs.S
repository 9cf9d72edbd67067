	.text
#ifdef PAD
	.skip	PAD, 0x90		# moves every function: a rebuilt program (TestNeverHarm)
#endif
	.globl	f_lock
	.type	f_lock, @function
f_lock:				# ++total, atomically: stepped out of line
	lock addq	$1, total(%rip)
	mov	total(%rip), %rax
	ret
	.size	f_lock, .-f_lock

	.globl	f_rip
	.type	f_rip, @function
f_rip:				# a RIP-relative load first
	mov	ripcount(%rip), %rax
	add	$1, %rax
	mov	%rax, ripcount(%rip)
	ret
	.size	f_rip, .-f_rip

	.globl	f_push
	.type	f_push, @function
f_push:				# a push first
	push	%rbp
	mov	%rsp, %rbp
	lea	(%rdi,%rdi,2), %rax
	pop	%rbp
	ret
	.size	f_push, .-f_push

	.data
	.globl	total, ripcount
	.p2align 3
total:	.quad	0
ripcount:	.quad	0
	.section	.note.GNU-stack,"",@progbits
