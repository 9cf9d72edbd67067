// g_load(p) = *(int *)p + 1. Its second instruction, 3 bytes in, is the
// load: a fault there leaves a signal frame whose saved pc is g_load+3,
// inside what a jump at g_load covers (mov 3 bytes + mov 2 bytes).
// Probe: g_load (ptrace/frames_test.go).
	.text
	.globl	g_load
	.type	g_load, @function
g_load:
	mov	%rdi, %rax		// 3 bytes
	mov	(%rax), %eax		// 2 bytes: faults on a protected page
	add	$1, %eax
	ret
	.size	g_load, .-g_load

	.section .note.GNU-stack,"",@progbits
