// harness runs machine code the Go tests give it on the real CPU and
// reports the registers, flags and memory afterwards. It is the oracle of
// the emulator and XOL tests (harness_test.go builds and drives it).
//
// Fixed areas (MAP_FIXED_NOREPLACE, all below 4 GiB except FAR, so 32-bit
// code can reach them):
//
//   DATA 0x10000000  64 KiB rw-   window 0x000-0x3ff is the test memory;
//                                 0x400 state in (32-bit), 0x500 state out
//                                 (32-bit), 0x600 landing mark, stack for
//                                 32-bit glue up to 0xff0
//   CODE 0x20000000  64 KiB rwx   the Go test writes instructions, slots,
//                                 landing stubs here
//   FAR  0x130000000  4 KiB rwx   more than 2 GiB away from CODE
//
// Protocol on stdin/stdout, little-endian:
//   out: hello {u64 magic, u64 back64, u64 run32ret}
//   in:  request {u32 mode, u32 nchunks, u64 entry, u64 regs[18],
//                 chunks: {u64 addr, u32 len, u8 bytes[len]}...}
//   out: reply {u64 fault_signo, u64 fault_rip, u64 regs[18],
//               u8 data[0x700]}
// regs are in gprobes order: rax rbx rcx rdx rsi rdi rbp rsp r8-r15 rip
// rflags. For 64-bit requests the registers are loaded by the harness and
// the entry is the first instruction; landing stubs jump to back64. For
// 32-bit requests the harness only switches to compatibility mode at entry
// (the Go side's glue loads and saves registers through DATA) and the
// glue comes back through a far jump to 64-bit code that jumps to run32ret.
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#define DATA 0x10000000UL
#define CODE 0x20000000UL
#define FAR 0x130000000UL
#define MAGIC 0x6770726f62657831ULL /* "gprobex1" */

struct state {
	uint64_t r[18];
};

struct state in_state, out_state;
uint64_t host_rsp, entry_addr;
static uint8_t scratch_stack[4096] __attribute__((aligned(16)));
uint8_t *scratch_top = scratch_stack + sizeof scratch_stack - 64;

void run64(void);
void back64(void);
void run32(void);
void run32ret(void);

// run64 loads in_state and jumps to entry_addr; back64 saves out_state and
// returns from run64. Only mov/lea/pop touch registers between popfq and the
// jump, and between the landing and pushfq, so flags are exact.
__asm__(
	".text\n"
	".globl run64\n"
	"run64:\n"
	"  push %rbx; push %rbp; push %r12; push %r13; push %r14; push %r15\n"
	"  mov %rsp, host_rsp(%rip)\n"
	"  lea in_state(%rip), %rax\n"
	"  mov scratch_top(%rip), %rsp\n"
	"  pushq 136(%rax)\n"
	"  popfq\n"
	"  mov 8(%rax), %rbx\n"
	"  mov 16(%rax), %rcx\n"
	"  mov 24(%rax), %rdx\n"
	"  mov 32(%rax), %rsi\n"
	"  mov 40(%rax), %rdi\n"
	"  mov 48(%rax), %rbp\n"
	"  mov 56(%rax), %rsp\n"
	"  mov 64(%rax), %r8\n"
	"  mov 72(%rax), %r9\n"
	"  mov 80(%rax), %r10\n"
	"  mov 88(%rax), %r11\n"
	"  mov 96(%rax), %r12\n"
	"  mov 104(%rax), %r13\n"
	"  mov 112(%rax), %r14\n"
	"  mov 120(%rax), %r15\n"
	"  mov (%rax), %rax\n"
	"  jmp *entry_addr(%rip)\n"
	".globl back64\n"
	"back64:\n"
	"  mov %rsp, out_state+56(%rip)\n"
	"  mov scratch_top(%rip), %rsp\n"
	"  pushfq\n"
	"  popq out_state+136(%rip)\n"
	"  mov %rax, out_state+0(%rip)\n"
	"  mov %rbx, out_state+8(%rip)\n"
	"  mov %rcx, out_state+16(%rip)\n"
	"  mov %rdx, out_state+24(%rip)\n"
	"  mov %rsi, out_state+32(%rip)\n"
	"  mov %rdi, out_state+40(%rip)\n"
	"  mov %rbp, out_state+48(%rip)\n"
	"  mov %r8, out_state+64(%rip)\n"
	"  mov %r9, out_state+72(%rip)\n"
	"  mov %r10, out_state+80(%rip)\n"
	"  mov %r11, out_state+88(%rip)\n"
	"  mov %r12, out_state+96(%rip)\n"
	"  mov %r13, out_state+104(%rip)\n"
	"  mov %r14, out_state+112(%rip)\n"
	"  mov %r15, out_state+120(%rip)\n"
	"  cld\n"
	"  mov host_rsp(%rip), %rsp\n"
	"  pop %r15; pop %r14; pop %r13; pop %r12; pop %rbp; pop %rbx\n"
	"  ret\n"
	// run32: far return into the 32-bit code segment at entry_addr.
	".globl run32\n"
	"run32:\n"
	"  push %rbx; push %rbp; push %r12; push %r13; push %r14; push %r15\n"
	"  mov %rsp, host_rsp(%rip)\n"
	"  mov scratch_top(%rip), %rsp\n"
	"  pushq $0x23\n"
	"  pushq entry_addr(%rip)\n"
	"  lretq\n"
	".globl run32ret\n"
	"run32ret:\n"
	"  cld\n"
	"  mov host_rsp(%rip), %rsp\n"
	"  pop %r15; pop %r14; pop %r13; pop %r12; pop %rbp; pop %rbx\n"
	"  ret\n");

static sigjmp_buf fault_jmp;
static volatile uint64_t fault_signo, fault_rip;

static void on_fault(int sig, siginfo_t *si, void *uc_) {
	ucontext_t *uc = uc_;
	(void)si;
	fault_signo = sig;
	fault_rip = uc->uc_mcontext.gregs[REG_RIP];
	siglongjmp(fault_jmp, 1);
}

static void xread(void *p, size_t n) {
	if (fread(p, 1, n, stdin) != n) {
		exit(0);
	}
}

static void xwrite(const void *p, size_t n) {
	if (fwrite(p, 1, n, stdout) != n) {
		exit(1);
	}
}

static void map(unsigned long addr, size_t len, int prot) {
	void *p = mmap((void *)addr, len, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (p != (void *)addr) {
		fprintf(stderr, "harness: cannot map %#lx\n", addr);
		exit(2);
	}
}

static int writable(uint64_t a, uint64_t n) {
	return (a >= DATA && a + n <= DATA + 0x10000) || (a >= CODE && a + n <= CODE + 0x10000) ||
	       (a >= FAR && a + n <= FAR + 0x1000);
}

int main(void) {
	map(DATA, 0x10000, PROT_READ | PROT_WRITE);
	map(CODE, 0x10000, PROT_READ | PROT_WRITE | PROT_EXEC);
	map(FAR, 0x1000, PROT_READ | PROT_WRITE | PROT_EXEC);

	stack_t ss = {.ss_sp = malloc(65536), .ss_size = 65536};
	sigaltstack(&ss, NULL);
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_fault;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
	sigaction(SIGSEGV, &sa, NULL);
	sigaction(SIGBUS, &sa, NULL);
	sigaction(SIGILL, &sa, NULL);
	sigaction(SIGFPE, &sa, NULL);

	uint64_t hello[3] = {MAGIC, (uint64_t)(uintptr_t)back64, (uint64_t)(uintptr_t)run32ret};
	xwrite(hello, sizeof hello);
	fflush(stdout);

	for (;;) {
		uint32_t hdr[2];
		xread(hdr, sizeof hdr);
		xread(&entry_addr, 8);
		xread(in_state.r, sizeof in_state.r);
		for (uint32_t i = 0; i < hdr[1]; i++) {
			uint64_t addr;
			uint32_t len;
			xread(&addr, 8);
			xread(&len, 4);
			if (!writable(addr, len)) {
				fprintf(stderr, "harness: chunk %#lx+%u outside the areas\n", (unsigned long)addr, len);
				exit(2);
			}
			xread((void *)(uintptr_t)addr, len);
		}
		memset(&out_state, 0, sizeof out_state);
		fault_signo = 0;
		fault_rip = 0;
		if (sigsetjmp(fault_jmp, 1) == 0) {
			if (hdr[0] == 32) {
				run32();
			} else {
				run64();
			}
		}
		uint64_t f[2] = {fault_signo, fault_rip};
		xwrite(f, sizeof f);
		xwrite(out_state.r, sizeof out_state.r);
		xwrite((void *)DATA, 0x700);
		fflush(stdout);
	}
}
