// The baseline: a minimal ptrace tracer. It starts the program, puts an
// int3 at ADDR (the program is built without PIE, so nm's address is the
// address), and on every hit reads two registers (rdi, rsi), puts the
// original byte back, single-steps it, and puts the int3 back. No
// emulation, no out-of-line execution: the textbook breakpoint. Threads:
// it follows clones (the other threads may miss the probe during a step,
// as such tracers do).
//   tracer ADDR PROGRAM ARGS...
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
	if (argc < 3) return 2;
	unsigned long addr = strtoul(argv[1], NULL, 0);
	pid_t pid = fork();
	if (pid == 0) {
		ptrace(PTRACE_TRACEME, 0, 0, 0);
		execv(argv[2], argv + 2);
		_exit(127);
	}
	int st;
	waitpid(pid, &st, 0);
	ptrace(PTRACE_SETOPTIONS, pid, 0, PTRACE_O_TRACECLONE | PTRACE_O_EXITKILL);
	long orig = ptrace(PTRACE_PEEKTEXT, pid, addr, 0);
	long trap = (orig & ~0xffL) | 0xcc;
	ptrace(PTRACE_POKETEXT, pid, addr, trap);
	ptrace(PTRACE_CONT, pid, 0, 0);
	long hits = 0;
	unsigned long sink = 0;
	for (;;) {
		pid_t t = waitpid(-1, &st, __WALL);
		if (t < 0) break;
		if (WIFEXITED(st) || WIFSIGNALED(st)) {
			if (t == pid) break;
			continue;
		}
		int sig = WSTOPSIG(st);
		if (sig == SIGTRAP && (st >> 16) == 0) {
			struct user_regs_struct r;
			ptrace(PTRACE_GETREGS, t, 0, &r);
			if (r.rip - 1 == addr) {
				hits++;
				sink += r.rdi + r.rsi; // the probe: read two registers
				ptrace(PTRACE_POKETEXT, t, addr, orig);
				r.rip = addr;
				ptrace(PTRACE_SETREGS, t, 0, &r);
				ptrace(PTRACE_SINGLESTEP, t, 0, 0);
				waitpid(t, &st, __WALL);
				ptrace(PTRACE_POKETEXT, t, addr, trap);
				ptrace(PTRACE_CONT, t, 0, 0);
				continue;
			}
			ptrace(PTRACE_CONT, t, 0, SIGTRAP);
			continue;
		}
		if (sig == SIGTRAP || sig == SIGSTOP) sig = 0; // clone events, new threads
		ptrace(PTRACE_CONT, t, 0, sig);
	}
	fprintf(stderr, "tracer: %ld hits (%lu)\n", hits, sink & 1);
	return 0;
}
