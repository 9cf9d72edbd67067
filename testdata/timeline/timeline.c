// The fixture of the timeline tests (cmd/gprobes/timeline_test.go).
//
//   timeline calls N     two threads, each N times: outer(i), which calls
//                        inner(i); mark(i); boom(i % 3)
//   timeline getppid N   two threads, each N getppid(2) system calls
//
// Each mode prints "done" and the sum of what the calls returned, and
// exits 0.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

__attribute__((noinline, noipa)) long inner(long x) { return 2 * x + 1; }
__attribute__((noinline, noipa)) long outer(long x) { return inner(x) + 1; }
__attribute__((noinline, noipa)) long boom(long x) { return x; }

// mark is long enough for a jump pad at its entry (boom is too short for
// one): its records come through the process's ring, out of order with the
// int3 route's of the others
__attribute__((noinline, noipa)) long mark(long x) {
	volatile long v = x;
	v = v * 3 + 7;
	v = (v - 7) / 3;
	return v;
}

static long n;
static int getppids;

static void *work(void *arg) {
	long sum = 0;
	for (long i = 0; i < n; i++) {
		if (getppids) {
			sum += syscall(SYS_getppid);
			continue;
		}
		sum += outer(i);
		sum += mark(i);
		sum += boom(i % 3);
	}
	return (void *)sum;
}

int main(int argc, char **argv) {
	if (argc != 3) {
		fprintf(stderr, "usage: timeline calls|getppid N\n");
		return 2;
	}
	getppids = strcmp(argv[1], "getppid") == 0;
	n = atol(argv[2]);
	pthread_t t;
	void *a, *b;
	pthread_create(&t, NULL, work, NULL);
	a = work(NULL);
	pthread_join(t, &b);
	printf("done %ld\n", (long)a + (long)b);
	return 0;
}
