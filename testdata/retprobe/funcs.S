# Functions for the return-probe tests, in assembly so that their shape
# is exact: a real call per level of recursion, two returns, a tail call
# by jmp, a jump out to a cold part that returns by itself.
	.text

	.globl	rec
	.type	rec, @function
rec:				# d + 7, by recursion d deep; two rets
	push	%rbx
	mov	%rdi, %rbx
	test	%rdi, %rdi
	jne	1f
	mov	$7, %eax
	pop	%rbx
	ret
1:	lea	-1(%rdi), %rdi
	call	rec
	add	$1, %rax
	pop	%rbx
	ret
	.size	rec, .-rec

	.globl	tailf
	.type	tailf, @function
tailf:				# x + 101: a tail call of other by jmp
	lea	1(%rdi), %rdi
	jmp	other
	.size	tailf, .-tailf

	.globl	other
	.type	other, @function
other:				# x + 100
	lea	100(%rdi), %rax
	ret
	.size	other, .-other

	.globl	hotf
	.type	hotf, @function
hotf:				# x >= 0: x + 2; x < 0: -1, in hotf.cold
	test	%rdi, %rdi
	js	hotf.cold
	lea	2(%rdi), %rax
	ret
	.size	hotf, .-hotf

	.type	pad, @function
pad:
	nop
	ret
	.size	pad, .-pad

	.type	hotf.cold, @function
hotf.cold:
	push	%rbx
	mov	$-1, %rax
	pop	%rbx
	ret
	.size	hotf.cold, .-hotf.cold

	.p2align 4, 0xcc
	.globl	tiny
	.type	tiny, @function
tiny:				# one instruction, then int3 fill to 16 bytes
	ret
	.size	tiny, .-tiny
	.p2align 4, 0xcc

	.globl	twoway
	.type	twoway, @function
twoway:				# x == 0: 1; x == 5: 3; else 2. Two rets: the
	test	%rdi, %rdi	# first with 5 bytes of plain code before it, the
	jne	1f		# second with a branch landing on it and no fill
	mov	$1, %eax	# after it (aftertiny follows at once)
	ret
1:	mov	$2, %eax
	cmp	$5, %rdi
	jne	2f
	mov	$3, %eax
2:	ret
	.size	twoway, .-twoway

	.globl	aftertiny
	.type	aftertiny, @function
aftertiny:
	mov	$9, %eax
	ret
	.size	aftertiny, .-aftertiny

	.section	.note.GNU-stack,"",@progbits
