// The fixture of the "never harm the target" tests (issue 9, SPEC §9):
// threads call probed functions a known number of times and the program
// checks its own result, so a probe that ran an instruction twice, or a
// breakpoint left behind, shows as a wrong total or a death.
//
//   harm [-t THREADS] [-n N] [-g FILE] [-s FILE]
//     -t T     threads (default 4)
//     -n N     calls of each function per thread (default 1000000)
//     -g FILE  wait until FILE exists before calling anything (a gate the
//              test opens once the probes, or the kill, are in place)
//     -s FILE  create FILE once every thread has made its first call
//              (the test knows the probes are being hit)
//
// Prints "total T want W" and exits 0 when every count is exact, 1 when
// not. f_lock's first instruction is a lock-prefixed read-modify-write of
// a global (single-stepped out of line), f_rip's a RIP-relative load
// (emulated), f_push's a push (emulated).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

long f_lock(void);
long f_rip(void);
long f_push(long);
extern long total, ripcount;

static long n = 1000000;
static const char *started;
static volatile int first;

static void *work(void *arg) {
	for (long i = 0; i < n; i++) {
		f_lock();
		f_push(i);
		if (i == 0 && __sync_add_and_fetch(&first, 1) == (long)arg && started) {
			FILE *f = fopen(started, "w");
			if (f) fclose(f);
		}
	}
	return NULL;
}

int main(int argc, char **argv) {
	long threads = 4;
	const char *gate = NULL;
	int c;
	while ((c = getopt(argc, argv, "t:n:g:s:")) != -1) {
		switch (c) {
		case 't': threads = atol(optarg); break;
		case 'n': n = atol(optarg); break;
		case 'g': gate = optarg; break;
		case 's': started = optarg; break;
		default: return 2;
		}
	}
	if (threads < 1 || threads > 64) return 2;
	printf("pid %d\n", getpid());
	fflush(stdout);
	struct stat st;
	while (gate && stat(gate, &st) != 0) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	pthread_t tids[64];
	for (long i = 0; i < threads; i++) pthread_create(&tids[i], NULL, work, (void *)threads);
	for (long i = 0; i < threads; i++) pthread_join(tids[i], NULL);
	for (long i = 0; i < 1000; i++) f_rip();
	long want = threads * n;
	printf("total %ld want %ld rip %ld\n", total, want, ripcount);
	fflush(stdout);
	return total == want && ripcount == 1000 ? 0 : 1;
}
