// The fixture of the timeline tests (cmd/gprobes/timeline_test.go).
//
//   timeline calls N     two threads, each N times: outer(i), which calls
//                        inner(i); mark(i); boom(i % 3)
//   timeline getppid N   two threads, each N getppid(2) system calls
//   timeline MODE N wait with both threads running, prints "ready" and
//                        waits for a line on its standard input; prints
//                        "calls over" when both threads' calls are
//                        (before a thread ends: a frozen tracer stops
//                        nothing of it till then)
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
static int getppids, waitgo;
static pthread_barrier_t started, start, over;

// work is the calls of one thread; arg is not NULL in the second thread
static void *work(void *arg) {
	long sum = 0;
	if (waitgo && arg) pthread_barrier_wait(&started); // it runs: its tracer let it go
	if (waitgo) pthread_barrier_wait(&start);
	for (long i = 0; i < n; i++) {
		if (getppids) {
			sum += syscall(SYS_getppid);
			continue;
		}
		sum += outer(i);
		sum += mark(i);
		sum += boom(i % 3);
	}
	if (waitgo) pthread_barrier_wait(&over);
	return (void *)sum;
}

int main(int argc, char **argv) {
	if (argc != 3 && !(argc == 4 && strcmp(argv[3], "wait") == 0)) {
		fprintf(stderr, "usage: timeline calls|getppid N [wait]\n");
		return 2;
	}
	getppids = strcmp(argv[1], "getppid") == 0;
	n = atol(argv[2]);
	waitgo = argc == 4;
	pthread_barrier_init(&started, NULL, 2);
	pthread_barrier_init(&start, NULL, 2);
	pthread_barrier_init(&over, NULL, 2);
	pthread_t t;
	void *a, *b;
	pthread_create(&t, NULL, work, &t);
	if (waitgo) {
		char buf[16];
		pthread_barrier_wait(&started);
		printf("ready\n");
		fflush(stdout);
		if (!fgets(buf, sizeof buf, stdin)) return 3;
	}
	a = work(NULL);
	if (waitgo) {
		printf("calls over\n");
		fflush(stdout);
	}
	pthread_join(t, &b);
	printf("done %ld\n", (long)a + (long)b);
	return 0;
}
