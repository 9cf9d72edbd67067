# The probed functions of the pad-safety fixture (storm.c). Each one's
# first instruction(s) are what a jump pad relocates:
#
#   f_call    call g_count           a direct call, exactly the 5 bytes a jump covers
#   f_leaf    mov %rdi,-8(%rsp)      a leaf that keeps its data in its red zone
#
# Each returns a value storm.c checks on every call; g_count counts its
# calls per thread, so a call run twice shows.
	.text

	.p2align 4
	.globl	f_call
	.type	f_call, @function
f_call:
	call	g_count
	add	$1, %rax
	ret
	.size	f_call, .-f_call

	.p2align 4
	.globl	f_leaf
	.type	f_leaf, @function
f_leaf:
	mov	%rdi, -8(%rsp)
	mov	%rdi, -16(%rsp)
	mov	-8(%rsp), %rax
	add	-16(%rsp), %rax
	add	%rdi, %rax
	ret
	.size	f_leaf, .-f_leaf


# long leaf_loop(long n, uintptr_t *r): calls f_leaf(i) for i = n..1,
# stores the rsp f_leaf starts with at *r, returns how many results were
# wrong (f_leaf(i) is 3i)
	.p2align 4
	.globl	leaf_loop
	.type	leaf_loop, @function
leaf_loop:
	push	%rbx
	push	%r12
	push	%r13
	mov	%rdi, %rbx
	xor	%r13, %r13
	lea	-8(%rsp), %rax
	mov	%rax, (%rsi)
1:	test	%rbx, %rbx
	jz	2f
	mov	%rbx, %rdi
	call	f_leaf
	lea	(%rbx,%rbx,2), %rcx
	cmp	%rcx, %rax
	je	3f
	inc	%r13
3:	dec	%rbx
	jmp	1b
2:	mov	%r13, %rax
	pop	%r13
	pop	%r12
	pop	%rbx
	ret
	.size	leaf_loop, .-leaf_loop

# long own_rdtsc(void): the program's own rdtsc, at own_rdtsc_at (storm -T
# traps it and emulates it in its SIGSEGV handler)
	.p2align 4
	.globl	own_rdtsc
	.globl	own_rdtsc_at
	.type	own_rdtsc, @function
own_rdtsc:
own_rdtsc_at:
	rdtsc
	shl	$32, %rdx
	or	%rdx, %rax
	ret
	.size	own_rdtsc, .-own_rdtsc

	.section	.note.GNU-stack,"",@progbits
