// The jump-pad benchmark's program (issue 11, scripts/bench-process): calls
// one probed function of kinds.S, chosen by the kind of its first
// instruction, CALLS times in each of THREADS threads in a tight loop, and
// prints the wall time per call like target.c, so the per-hit cost of a
// probe on it is (probed ns/call - native ns/call).
//
//   kinds CALLS THREADS FUNC      FUNC: rip lock push endbr call
//
// It checks its own result: every call's return value, and for lock the
// global counter (exactly CALLS*THREADS). Prints "calls N ns/call X bad B
// func F cpu-per-call C" (C: the process's CPU time per call, ns, kernel
// time for its traps included) and exits 0 when all is exact, 1 when not
// (a probe broke the program), 2 on bad arguments.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

long k_rip(long, long);
long k_lock(long, long);
long k_push(long, long);
long k_endbr(long, long);
long k_call(long, long);
extern long kbase, klock;

static long n;
static int kind;

#define LOOP(CALL, WANT)                      \
	for (long i = 0; i < n; i++) {            \
		if (CALL(i, 7) != (WANT)) bad++;      \
	}

static void *loop(void *arg) {
	long bad = 0;
	switch (kind) {
	case 0: LOOP(k_rip, 1000 + i); break;
	case 1: LOOP(k_lock, i); break;
	case 2: LOOP(k_push, 3 * i); break;
	case 3: LOOP(k_endbr, i + 7); break;
	case 4: LOOP(k_call, i + 1 + 7); break;
	}
	return (void *)bad;
}

int main(int argc, char **argv) {
	static const char *names[] = {"rip", "lock", "push", "endbr", "call"};
	if (argc != 4) {
		fprintf(stderr, "usage: kinds CALLS THREADS rip|lock|push|endbr|call\n");
		return 2;
	}
	n = atol(argv[1]);
	int t = atoi(argv[2]);
	kind = -1;
	for (int i = 0; i < 5; i++)
		if (strcmp(argv[3], names[i]) == 0) kind = i;
	if (n < 1 || t < 1 || t > 64 || kind < 0) {
		fprintf(stderr, "kinds: bad arguments\n");
		return 2;
	}
	struct timespec a, b, ca, cb;
	clock_gettime(CLOCK_MONOTONIC, &a);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ca);
	long bad = 0;
	if (t == 1) {
		bad = (long)loop(NULL);
	} else {
		pthread_t th[64];
		for (int i = 0; i < t; i++) pthread_create(&th[i], NULL, loop, NULL);
		for (int i = 0; i < t; i++) {
			void *r;
			pthread_join(th[i], &r);
			bad += (long)r;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cb);
	double ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
	double cpu = (cb.tv_sec - ca.tv_sec) * 1e9 + (cb.tv_nsec - ca.tv_nsec);
	long calls = n * t;
	if (kind == 1 && klock != calls) bad += calls > klock ? calls - klock : klock - calls;
	if (kbase != 1000) bad++;
	printf("calls %ld ns/call %.1f bad %ld func %s cpu-per-call %.1f\n", calls, ns / calls, bad, argv[3], cpu / calls);
	if (bad) {
		fprintf(stderr, "kinds: %ld wrong results (klock %ld, want %ld)\n", bad, klock, kind == 1 ? calls : 0L);
		return 1;
	}
	return 0;
}
