/*
 * switch: the fixture of the switching tests (cmd/gprobes/switch_test.go):
 * a() is A, b() is B and c() is C of "B recorded only between A and C"
 * (SPEC §6, docs/language.md "Switching").
 *
 *   switch rounds THREADS LOOPS K M
 *       the main thread calls b(0) 5 times; then each of THREADS threads,
 *       LOOPS times, under one mutex (rounds never overlap): a(); b(1) K
 *       times; c(); b(2) M times; then the main thread calls b(0) 5
 *       times more. Prints "b N" (every call of b) and exits 0. B between
 *       A and C is exactly THREADS*LOOPS*K calls, all of them b(1).
 *
 *   switch syscalls THREADS LOOPS K M
 *       the same with system calls for a, b and c: getpid, getppid and
 *       gettid (syscall(2), no library cache), for the kernel target's
 *       tracepoints; prints "getppid N".
 *
 *   switch phases THREADS
 *       prints "ready PID", then for each line N read from stdin starts
 *       THREADS threads that each call b(N) N times, joins them and
 *       prints "done N". It ends at the end of its input.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

volatile long sink, na, nc;
static long calls; /* calls of b, under mu or single-threaded */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static long loops, k, m, per;
static int sys;

__attribute__((noinline)) void a(void) { na++; }
__attribute__((noinline)) void b(long phase) { sink += phase; }
__attribute__((noinline)) void c(void) { nc++; }

static void A(void) { if (sys) syscall(SYS_getpid); else a(); }
static void B(long phase) { if (sys) syscall(SYS_getppid); else b(phase); calls++; }
static void C(void) { if (sys) syscall(SYS_gettid); else c(); }

static void *round_work(void *arg)
{
	(void)arg;
	for (long i = 0; i < loops; i++) {
		pthread_mutex_lock(&mu);
		A();
		for (long j = 0; j < k; j++)
			B(1);
		C();
		for (long j = 0; j < m; j++)
			B(2);
		pthread_mutex_unlock(&mu);
	}
	return NULL;
}

static void *phase_work(void *arg)
{
	(void)arg;
	for (long i = 0; i < per; i++)
		b(per);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t th[64];
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc == 6 && (strcmp(argv[1], "rounds") == 0 || strcmp(argv[1], "syscalls") == 0)) {
		int n = atoi(argv[2]);
		sys = strcmp(argv[1], "syscalls") == 0;
		loops = atol(argv[3]);
		k = atol(argv[4]);
		m = atol(argv[5]);
		if (n < 1 || n > 64)
			return 2;
		for (int i = 0; i < 5; i++)
			B(0);
		for (int i = 0; i < n; i++)
			pthread_create(&th[i], NULL, round_work, NULL);
		for (int i = 0; i < n; i++)
			pthread_join(th[i], NULL);
		for (int i = 0; i < 5; i++)
			B(0);
		printf("%s %ld\n", sys ? "getppid" : "b", calls);
		return 0;
	}
	if (argc == 3 && strcmp(argv[1], "phases") == 0) {
		int n = atoi(argv[2]);
		char line[64];
		if (n < 1 || n > 64)
			return 2;
		printf("ready %d\n", (int)getpid());
		while (fgets(line, sizeof line, stdin)) {
			per = atol(line);
			for (int i = 0; i < n; i++)
				pthread_create(&th[i], NULL, phase_work, NULL);
			for (int i = 0; i < n; i++)
				pthread_join(th[i], NULL);
			printf("done %ld\n", per);
		}
		return 0;
	}
	fprintf(stderr, "usage: switch rounds|syscalls THREADS LOOPS K M, switch phases THREADS\n");
	return 2;
}
