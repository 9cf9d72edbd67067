// The record path's fixture: THREADS threads each call hot(), a function
// of its own that the compiler may not inline, CALLS times in a tight
// loop, all at once. A probe that logs two words on hot() makes
// CALLS*THREADS records as fast as the process can commit them.
//
//   burst CALLS THREADS [-w]
//
// -w: wait for a line on standard input first (a probe is inserted
// meanwhile). Prints "pid N" at its start and "done CALLS*THREADS SUM MS"
// once every thread has returned (SUM: the sum of hot()'s results,
// checked against the formula, so a probe that changed a result shows;
// MS: the wall time of the calls, from the first thread's start);
// exits 0 when the sum is right, 1 when not, 2 on bad arguments.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) long hot(long a, long b) {
	volatile long x = a; // a stack store first: 5 bytes a jump covers
	return x + b;
}

static long calls;

static void *loop(void *arg) {
	long s = 0, t = (long)arg;
	for (long i = 0; i < calls; i++) s += hot(i, t);
	return (void *)s;
}

int main(int argc, char **argv) {
	if (argc < 3 || (calls = atol(argv[1])) <= 0 || atoi(argv[2]) <= 0 || atoi(argv[2]) > 256) {
		fprintf(stderr, "usage: burst CALLS THREADS [-w]\n");
		return 2;
	}
	int threads = atoi(argv[2]);
	printf("pid %d\n", (int)getpid());
	fflush(stdout);
	if (argc > 3 && strcmp(argv[3], "-w") == 0) {
		char line[64];
		if (!fgets(line, sizeof line, stdin)) return 2;
	}
	pthread_t th[256];
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long i = 0; i < threads; i++) pthread_create(&th[i], 0, loop, (void *)i);
	long sum = 0, want = 0;
	for (long i = 0; i < threads; i++) {
		void *r;
		pthread_join(th[i], &r);
		sum += (long)r;
		want += calls * (calls - 1) / 2 + calls * i;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("done %ld %ld %.1f\n", calls * threads, sum, (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
	fflush(stdout);
	return sum == want ? 0 : 1;
}
