// The fixture of the "never harm the target" tests (issue 9, SPEC §9):
// threads call probed functions a known number of times and the program
// checks its own result, so a probe that ran an instruction twice, or a
// breakpoint left behind, shows as a wrong total or a death.
//
//   harm [-t THREADS] [-n N] [-g FILE] [-s FILE] [-e FILE]
//     -t T     threads (default 4)
//     -n N     calls of each function per thread (default 1000000)
//     -g FILE  wait until FILE exists before calling anything (a gate the
//              test opens once the probes, or the kill, are in place)
//     -s FILE  create FILE once every thread has made its first call
//              (the test knows the probes are being hit)
//     -e FILE  stop calling once FILE exists (then -n is only a bound):
//              the test decides when the threads stop, however fast the
//              probes are, so what it does to the probes comes mid-run
//
// Prints "total T want W" and exits 0 when every count is exact, 1 when
// not: want is the calls the threads made (T*N without -e), and every
// f_push must return three times its argument. f_lock's first
// instruction is a lock-prefixed read-modify-write of a global
// (single-stepped out of line on the int3 route), f_rip's a RIP-relative
// load (emulated), f_push's a push (emulated).
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

static long n = 1000000, threads = 4;
static const char *started;
static volatile int first, stopping, finished;
static long calls[64], wrong[64];

static void *work(void *arg) {
	long me = (long)arg, i;
	for (i = 0; i < n && !stopping; i++) {
		f_lock();
		if (f_push(i) != 3 * i) wrong[me]++;
		if (i == 0 && __sync_add_and_fetch(&first, 1) == threads && started) {
			FILE *f = fopen(started, "w");
			if (f) fclose(f);
		}
	}
	calls[me] = i;
	__sync_add_and_fetch(&finished, 1);
	return NULL;
}

static int exists(const char *path) {
	struct stat st;
	return stat(path, &st) == 0;
}

static void nap(void) {
	struct timespec ts = {0, 1000000};
	nanosleep(&ts, NULL);
}

int main(int argc, char **argv) {
	const char *gate = NULL, *stop = NULL;
	int c;
	while ((c = getopt(argc, argv, "t:n:g:s:e:")) != -1) {
		switch (c) {
		case 't': threads = atol(optarg); break;
		case 'n': n = atol(optarg); break;
		case 'g': gate = optarg; break;
		case 's': started = optarg; break;
		case 'e': stop = optarg; break;
		default: return 2;
		}
	}
	if (threads < 1 || threads > 64) return 2;
	printf("pid %d\n", getpid());
	fflush(stdout);
	while (gate && !exists(gate)) nap();
	pthread_t tids[64];
	for (long i = 0; i < threads; i++) pthread_create(&tids[i], NULL, work, (void *)i);
	if (stop) {
		while (finished < threads && !exists(stop)) nap();
		stopping = 1;
	}
	for (long i = 0; i < threads; i++) pthread_join(tids[i], NULL);
	for (long i = 0; i < 1000; i++) f_rip();
	long want = 0, bad = 0;
	for (long i = 0; i < threads; i++) {
		want += calls[i];
		bad += wrong[i];
	}
	printf("total %ld want %ld rip %ld wrong %ld\n", total, want, ripcount, bad);
	fflush(stdout);
	return total == want && ripcount == 1000 && bad == 0 ? 0 : 1;
}
