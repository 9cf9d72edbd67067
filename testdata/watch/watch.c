/*
 * watch: the fixture of the watch-probe tests (ptrace/watch_test.go,
 * cmd/gprobes). Its globals are written and read an exact number of times,
 * each access one instruction (volatile), by threads some of which exist
 * before the probes go in and some of which are started after:
 *
 *   watch W R T1 T2 [fork|exec]
 *
 * starts T1 threads that wait, prints "ready <pid>", reads a line from
 * stdin, starts T2 more; then every one of the T1+T2 threads writes
 * counter W times, reads it R times, and writes v[k] W+k times (k 0..4).
 * The main thread touches none of them. Then it prints
 *
 *   done threads T writes W*T reads R*T
 *
 * and exits 0. With "fork" the main thread then forks a child that writes
 * counter W times and exits 0 (the parent waits and prints "child
 * writes W"); with "exec" it execs itself as `watch W R 0 1` (one thread
 * more, stdin's next line first).
 *
 * With "nowait" it reads no line from stdin. With "bump" it only calls
 * bump() and lockbump() W times each, one after the other, and prints
 * "bumped W": their first instructions load b1 (a mov: emulated on the
 * int3 route) and add to b2 (a lock add: stepped out of line), and a probe
 * at each puts the store in gprobes' hands (a jump pad, a slot, the
 * emulator).
 *
 * A SIGTRAP it gets kills it (the default): a debug register left set by
 * a tracer that died shows so.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

volatile long counter;
volatile int v[5];
volatile int b1, b2;

__attribute__((noinline)) int bump(void)
{
	return b1;
}

__attribute__((noinline)) void lockbump(void)
{
	__atomic_add_fetch(&b2, 1, __ATOMIC_SEQ_CST);
}
static volatile long sink;
static long W, R;
static pthread_barrier_t start;

static void *work(void *arg)
{
	long s = 0;
	(void)arg;
	pthread_barrier_wait(&start);
	for (long i = 0; i < W; i++)
		counter = i;
	for (long i = 0; i < R; i++)
		s += counter;
	for (int k = 0; k < 5; k++)
		for (long i = 0; i < W + k; i++)
			v[k] = (int)i;
	sink = s;
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: watch W R T1 T2 [fork|exec]\n");
		return 2;
	}
	W = atol(argv[1]);
	R = atol(argv[2]);
	int t1 = atoi(argv[3]), t2 = atoi(argv[4]);
	const char *then = argc > 5 ? argv[5] : "";
	if (strcmp(then, "bump") == 0) {
		for (long i = 0; i < W; i++) {
			sink += bump();
			lockbump();
		}
		printf("bumped %ld\n", W);
		return 0;
	}
	pthread_t th[64];
	if (t1 + t2 > 64 || t1 + t2 < 1)
		return 2;
	setvbuf(stdout, NULL, _IONBF, 0);
	pthread_barrier_init(&start, NULL, t1 + t2 + 1);
	for (int i = 0; i < t1; i++)
		pthread_create(&th[i], NULL, work, NULL);
	printf("ready %d\n", (int)getpid());
	char line[64];
	if (strcmp(then, "nowait") != 0 && !fgets(line, sizeof line, stdin))
		return 3;
	for (int i = t1; i < t1 + t2; i++)
		pthread_create(&th[i], NULL, work, NULL);
	pthread_barrier_wait(&start);
	for (int i = 0; i < t1 + t2; i++)
		pthread_join(th[i], NULL);
	printf("done threads %d writes %ld reads %ld\n", t1 + t2, W * (t1 + t2), R * (t1 + t2));
	if (strcmp(then, "fork") == 0) {
		pid_t c = fork();
		if (c == 0) {
			for (long i = 0; i < W; i++)
				counter = i;
			_exit(0);
		}
		int st;
		waitpid(c, &st, 0);
		printf("child writes %ld status %d\n", W, st);
		return st == 0 ? 0 : 1;
	}
	if (strcmp(then, "exec") == 0) {
		char *args[] = {argv[0], argv[1], argv[2], "0", "1", NULL};
		execv("/proc/self/exe", args);
		return 4;
	}
	return 0;
}
