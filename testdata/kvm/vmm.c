/* A minimal VMM: a workload for gprobes' kernel target on the kvm:kvm_pio
 * and kvm:kvm_userspace_exit tracepoints (testdata/examples/kvm_pio.dpdf).
 *
 *   gcc -O2 -o vmm testdata/kvm/vmm.c
 *   ./vmm N M K [I]
 *
 * One VM, 64 KiB of memory, one vCPU in real mode running the guest below:
 * N writes to port 0x20 (noise), a write to port 0x10 (start marker), M
 * writes to port 0x20, a write to port 0x11 (stop marker), K writes to port
 * 0x20, I reads from port 0x30 (0 when not given), then hlt. Every access
 * is a 4-byte out/in (outl/inl with an immediate port), so it leaves the
 * guest on its own: one KVM_EXIT_IO each. The j-th write to port 0x20
 * carries j (1 ... N+M+K); a marker carries the number of port 0x20 writes
 * before it (N at 0x10, N+M at 0x11); the j-th read from port 0x30 is
 * answered with 0x30000000+j. The VMM checks every value and the order of
 * the phases, and at the hlt prints one line and exits 0:
 *
 *   pid=P before=N inside=M after=K in=I runs=R eintr=E
 *
 * before/inside/after are the port 0x20 writes it saw in each phase, in
 * the reads from port 0x30, runs the KVM_RUN calls that returned (E of
 * them with EINTR). Anything unexpected (no /dev/kvm, a failed ioctl, an
 * exit or a value out of place) is a message on stderr and exit 1; bad
 * arguments exit 2.
 *
 * What the test machine's kernel reports for "vmm N M K I", checked with
 * bpftrace 0.17 filtered by the VMM's pid (Linux 6.18, a guest itself on
 * AMD EPYC with no VMX/SVM: its KVM is PVM, CONFIG_KVM_PVM=y, built in):
 *
 *   kvm:kvm_pio            N+M+K+2+I hits: one per out, rw=1, size=4,
 *                          count=1, port and val as written above; and one
 *                          per in as well, rw=0, port=0x30, size=4,
 *                          count=1, val the value the VMM answered (the
 *                          event fires when the in completes, on the
 *                          KVM_RUN after the exit).
 *   kvm:kvm_userspace_exit N+M+K+I+3 hits: one per KVM_RUN that returns
 *                          (= runs): reason=2 (KVM_EXIT_IO) and errno=0 for
 *                          the N+M+K+2+I port accesses, reason=5
 *                          (KVM_EXIT_HLT) errno=0 once. A KVM_RUN ended by
 *                          a signal would add one with errno=-4 (counted
 *                          in runs and eintr).
 *   kvm:kvm_exit, kvm:kvm_entry, kvm:kvm_hypercall: no hits here.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

/* The guest, 16-bit real mode, loaded at 0x1000. The VMM sets ebx = N,
 * esi = M, edi = K, ebp = I. eax counts the writes to port 0x20. */
extern const unsigned char guest[], guest_end[];
__asm__(
	".pushsection .rodata\n"
	".code16\n"
	".macro burst count\n"
	"	movl \\count, %ecx\n"
	"1:	jecxz 2f\n"
	"	incl %eax\n"
	"	outl %eax, $0x20\n"
	"	decl %ecx\n"
	"	jmp 1b\n"
	"2:\n"
	".endm\n"
	"guest:\n"
	"	xorl %eax, %eax\n"
	"	burst %ebx\n"           /* N: noise */
	"	outl %eax, $0x10\n"     /* start */
	"	burst %esi\n"           /* M: the writes to trace */
	"	outl %eax, $0x11\n"     /* stop */
	"	burst %edi\n"           /* K: noise */
	"	movl %ebp, %ecx\n"
	"3:	jecxz 4f\n"
	"	inl $0x30, %eax\n"      /* I: reads */
	"	decl %ecx\n"
	"	jmp 3b\n"
	"4:	hlt\n"
	"guest_end:\n"
	".code64\n"
	".popsection\n");

#define MEM_SIZE 0x10000
#define CODE_AT 0x1000

static void die(const char *what)
{
	fprintf(stderr, "vmm: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void fail(const char *fmt, unsigned long a, unsigned long b)
{
	fprintf(stderr, "vmm: ");
	fprintf(stderr, fmt, a, b);
	fprintf(stderr, "\n");
	exit(1);
}

static unsigned long arg(const char *s)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 0);
	if (errno || *s == '-' || *s == 0 || *end || v > 0x0fffffff) {
		fprintf(stderr, "vmm: %s: a count from 0 to 0x0fffffff\n", s);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	if (argc < 4 || argc > 5) {
		fprintf(stderr, "usage: vmm N M K [I]\n");
		return 2;
	}
	unsigned long n = arg(argv[1]), m = arg(argv[2]), k = arg(argv[3]);
	unsigned long in = argc == 5 ? arg(argv[4]) : 0;

	int kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (kvm < 0)
		die("open /dev/kvm");
	int api = ioctl(kvm, KVM_GET_API_VERSION, 0);
	if (api != KVM_API_VERSION)
		fail("KVM API version %lu, want %lu", (unsigned long)api, KVM_API_VERSION);
	int vm = ioctl(kvm, KVM_CREATE_VM, 0UL);
	if (vm < 0)
		die("KVM_CREATE_VM");
	unsigned char *mem = mmap(NULL, MEM_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED)
		die("mmap guest memory");
	memcpy(mem + CODE_AT, guest, guest_end - guest);
	struct kvm_userspace_memory_region region = {
		.slot = 0, .guest_phys_addr = 0, .memory_size = MEM_SIZE, .userspace_addr = (uintptr_t)mem,
	};
	if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &region) < 0)
		die("KVM_SET_USER_MEMORY_REGION");
	int vcpu = ioctl(vm, KVM_CREATE_VCPU, 0UL);
	if (vcpu < 0)
		die("KVM_CREATE_VCPU");
	int runsize = ioctl(kvm, KVM_GET_VCPU_MMAP_SIZE, 0);
	if (runsize < (int)sizeof(struct kvm_run))
		die("KVM_GET_VCPU_MMAP_SIZE");
	struct kvm_run *run = mmap(NULL, runsize, PROT_READ | PROT_WRITE, MAP_SHARED, vcpu, 0);
	if (run == MAP_FAILED)
		die("mmap kvm_run");

	struct kvm_sregs sregs;
	if (ioctl(vcpu, KVM_GET_SREGS, &sregs) < 0)
		die("KVM_GET_SREGS");
	sregs.cs.base = 0;
	sregs.cs.selector = 0;
	if (ioctl(vcpu, KVM_SET_SREGS, &sregs) < 0)
		die("KVM_SET_SREGS");
	struct kvm_regs regs = {
		.rip = CODE_AT, .rflags = 2, .rsp = MEM_SIZE - 16,
		.rbx = n, .rsi = m, .rdi = k, .rbp = in,
	};
	if (ioctl(vcpu, KVM_SET_REGS, &regs) < 0)
		die("KVM_SET_REGS");

	/* phase: 0 before the start marker, 1 inside, 2 after the stop */
	unsigned long writes = 0, phase[3] = {0, 0, 0}, reads = 0, runs = 0, eintr = 0;
	int state = 0;
	for (;;) {
		int r = ioctl(vcpu, KVM_RUN, 0);
		runs++;
		if (r < 0 && errno == EINTR) {
			eintr++;
			continue;
		}
		if (r < 0)
			die("KVM_RUN");
		if (run->exit_reason == KVM_EXIT_HLT)
			break;
		if (run->exit_reason != KVM_EXIT_IO) {
			unsigned long detail = 0;
			if (run->exit_reason == KVM_EXIT_FAIL_ENTRY)
				detail = run->fail_entry.hardware_entry_failure_reason;
			else if (run->exit_reason == KVM_EXIT_INTERNAL_ERROR)
				detail = run->internal.suberror;
			fail("unexpected exit reason %lu (detail %#lx)", run->exit_reason, detail);
		}
		if (run->io.size != 4 || run->io.count != 1)
			fail("port %#lx: an access of size %lu, want 4, count 1", run->io.port, run->io.size);
		uint32_t *data = (uint32_t *)((char *)run + run->io.data_offset);
		if (run->io.direction == KVM_EXIT_IO_IN) {
			if (run->io.port != 0x30 || state != 2)
				fail("in from port %#lx in phase %lu", run->io.port, state);
			*data = 0x30000000 + ++reads;
			continue;
		}
		switch (run->io.port) {
		case 0x20:
			writes++;
			if (*data != writes)
				fail("write %lu to port 0x20 carries %#lx", writes, *data);
			phase[state]++;
			break;
		case 0x10:
		case 0x11:
			if (state != run->io.port - 0x10 || *data != (state ? n + m : n))
				fail("marker at port %#lx out of place (value %#lx)", run->io.port, *data);
			state++;
			break;
		default:
			fail("out to port %#lx (value %#lx)", run->io.port, *data);
		}
	}
	if (state != 2 || phase[0] != n || phase[1] != m || phase[2] != k || reads != in)
		fail("hlt before the program's end (%lu writes, %lu reads)", writes, reads);
	printf("pid=%d before=%lu inside=%lu after=%lu in=%lu runs=%lu eintr=%lu\n",
	       (int)getpid(), phase[0], phase[1], phase[2], reads, runs, eintr);
	return 0;
}
