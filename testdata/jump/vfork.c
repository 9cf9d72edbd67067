// The vfork fixture of the jump-pad tests (issue 11): the parent calls
// probed() N times, then vforks; the child, sharing the parent's memory
// and thread control block, calls it N times before _exit; the parent
// calls it N more times. Prints "parent P child C sum S" (S checks every
// return value); exits 1 when a result is wrong.
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noinline)) long probed(long a) {
	__asm__ volatile("" ::: "memory");
	return a * 3 + 1;
}

int main(int argc, char **argv) {
	long n = argc > 1 ? atol(argv[1]) : 1000;
	volatile long bad = 0;
	for (long i = 0; i < n; i++)
		if (probed(i) != i * 3 + 1) bad++;
	pid_t c = vfork();
	if (c == 0) {
		for (long i = 0; i < n; i++)
			if (probed(i) != i * 3 + 1) bad++;
		_exit(bad ? 1 : 0);
	}
	int st = 0;
	waitpid(c, &st, 0);
	for (long i = 0; i < n; i++)
		if (probed(i) != i * 3 + 1) bad++;
	printf("parent %d child %d bad %ld status %d\n", getpid(), c, bad, st);
	return bad || st ? 1 : 0;
}
