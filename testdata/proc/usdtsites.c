// app:twice, one static probe (sys/sdt.h) at two sites (an always-inline
// function called twice), behind its semaphore, for the process
// targets' USDT tests (ptrace/usdt_test.go). usdtsites N: N rounds of
// twice(i) and twice(100 * i), then a fork and the same rounds in the
// child; each prints "PID enabled E" (E: the sites that found the
// semaphore set).
#define _SDT_HAS_SEMAPHORES 1
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>
#include <sys/wait.h>
#include <unistd.h>

__extension__ unsigned short app_twice_semaphore __attribute__((unused)) __attribute__((section(".probes")));

static inline __attribute__((always_inline)) long twice(long v) {
	if (__builtin_expect(app_twice_semaphore, 0)) {
		STAP_PROBE1(app, twice, v);
		return 1;
	}
	return 0;
}

static long rounds(long n) {
	long enabled = 0;
	for (volatile long i = 0; i < n; i++) {
		enabled += twice(i);
		enabled += twice(100 * i);
	}
	return enabled;
}

int main(int argc, char **argv) {
	long n = argc > 1 ? atol(argv[1]) : 1;
	setvbuf(stdout, NULL, _IONBF, 0);
	printf("parent enabled %ld\n", rounds(n));
	pid_t c = fork();
	if (c == 0) {
		printf("child enabled %ld\n", rounds(n));
		return 0;
	}
	int st;
	waitpid(c, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
