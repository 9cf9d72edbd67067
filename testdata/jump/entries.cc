// Driver of entries.S: THREADS threads call the mode's functions N times
// each and check every result; prints "bad B calls C" and exits 1 when a
// result was wrong. Usage: entries tail|cold|pad N THREADS
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
long t_body(long, long);
long t_tail(long, long);
int c_func(int);
long lp_func(int);
int lp_cleanups;
__attribute__((noinline)) int thrower(int x) {
	if (x < 0)
		throw x;
	return x * 2;
}
}

static const char *mode;
static long n;
static long bad[64], calls[64], caught[64];

static void *worker(void *arg) {
	long t = (long)arg;
	for (long i = 0; i < n; i++) {
		long a = i * 13 + t, b = i % 97 + 1;
		if (!strcmp(mode, "tail")) {
			if (t_body(a, b) != a + 2 * b)
				bad[t]++;
			if (t_tail(a, b) != a + 3 * b)
				bad[t]++;
			calls[t] += 2;
		} else if (!strcmp(mode, "cold")) {
			int x = (int)(i % 1000) - 500;
			int want = (x < 0 ? -x : x) + 3;
			if (c_func(x) != want)
				bad[t]++;
			calls[t]++;
		} else {
			int x = (int)(i % 8) - 2; // -2 and -1 throw
			try {
				long r = lp_func(x);
				if (x < 0 || r != 2 * x + 1)
					bad[t]++;
			} catch (int e) {
				if (e != x || x >= 0)
					bad[t]++;
				caught[t]++;
			}
			calls[t]++;
		}
	}
	return NULL;
}

int main(int argc, char **argv) {
	if (argc < 4) {
		fprintf(stderr, "usage: entries tail|cold|pad N THREADS\n");
		return 2;
	}
	mode = argv[1];
	n = atol(argv[2]);
	int threads = atoi(argv[3]);
	pthread_t th[64];
	for (long t = 0; t < threads; t++)
		pthread_create(&th[t], NULL, worker, (void *)t);
	long b = 0, c = 0, k = 0;
	for (long t = 0; t < threads; t++) {
		pthread_join(th[t], NULL);
		b += bad[t];
		c += calls[t];
		k += caught[t];
	}
	if (!strcmp(mode, "pad") && (k != lp_cleanups || k != threads * (n / 8) * 2 + threads * (n % 8 > 0) + threads * (n % 8 > 1)))
		b++;
	printf("bad %ld calls %ld caught %ld cleanups %d\n", b, c, k, lp_cleanups);
	return b != 0;
}
