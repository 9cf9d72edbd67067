# The probed functions of the jump-pad benchmark (issue 11,
# scripts/bench-process): one per kind of FIRST instruction, which is what
# decides how a probe can be placed (emulated, stepped out of line, or
# relocated into a jump pad). Each takes (a, b) in rdi, rsi and returns a
# value kinds.c checks on every call.
#
#   k_rip    mov kbase(%rip),%rax     RIP-relative load        -> kbase + a
#   k_lock   lock addq $1,klock(%rip) lock-prefixed RMW        -> a (klock counts calls)
#   k_push   push %rbp                push, frame set-up       -> 3a
#   k_endbr  endbr64, then push %rbp  CET landing pad first    -> a + b
#   k_call   call k_leaf              a call first             -> a + 1 + b
#
# No function has a branch into its first 5 bytes, so a 5-byte jump fits
# over the first instruction(s) of each.
	.text

	.p2align 4
	.globl	k_rip
	.type	k_rip, @function
k_rip:
	mov	kbase(%rip), %rax
	add	%rdi, %rax
	ret
	.size	k_rip, .-k_rip

	.p2align 4
	.globl	k_lock
	.type	k_lock, @function
k_lock:
	lock addq	$1, klock(%rip)
	mov	%rdi, %rax
	ret
	.size	k_lock, .-k_lock

	.p2align 4
	.globl	k_push
	.type	k_push, @function
k_push:
	push	%rbp
	mov	%rsp, %rbp
	lea	(%rdi,%rdi,2), %rax
	pop	%rbp
	ret
	.size	k_push, .-k_push

	.p2align 4
	.globl	k_endbr
	.type	k_endbr, @function
k_endbr:
	endbr64
	push	%rbp
	mov	%rsp, %rbp
	lea	(%rdi,%rsi), %rax
	pop	%rbp
	ret
	.size	k_endbr, .-k_endbr

	.p2align 4
	.globl	k_call
	.type	k_call, @function
k_call:
	call	k_leaf
	add	%rsi, %rax
	ret
	.size	k_call, .-k_call

	.p2align 4
	.type	k_leaf, @function
k_leaf:
	lea	1(%rdi), %rax
	ret
	.size	k_leaf, .-k_leaf

	.data
	.globl	kbase, klock
	.p2align 3
kbase:	.quad	1000
klock:	.quad	0
	.section	.note.GNU-stack,"",@progbits
