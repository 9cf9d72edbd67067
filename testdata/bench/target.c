// The benchmark's probed program: calls work() N times (in T threads) and
// prints the wall time per call, so the per-hit cost of a probe on work()
// is (probed time - native time) / N.
//   target N [T]
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

__attribute__((noinline)) long work(long a, long b) {
	__asm__ volatile("" ::: "memory");
	return a * 3 + b;
}

static long n;

static void *loop(void *arg) {
	long s = 0;
	for (long i = 0; i < n; i++) s += work(i, 7);
	return (void *)s;
}

int main(int argc, char **argv) {
	n = argc > 1 ? atol(argv[1]) : 100000;
	int t = argc > 2 ? atoi(argv[2]) : 1;
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	long sum = 0;
	if (t <= 1) {
		sum = (long)loop(NULL);
	} else {
		pthread_t th[64];
		for (int i = 0; i < t && i < 64; i++) pthread_create(&th[i], NULL, loop, NULL);
		for (int i = 0; i < t && i < 64; i++) {
			void *r;
			pthread_join(th[i], &r);
			sum += (long)r;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	double ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
	long calls = n * (t > 1 ? t : 1);
	printf("calls %ld ns/call %.1f sum %ld\n", calls, ns / calls, sum);
	return 0;
}
