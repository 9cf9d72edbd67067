// The fixture of the return-probe tests: calls the functions of funcs.S
// (and a few of its own) a known number of times, checks every result,
// and prints what a probe should have seen.
//
//   retprobe rec N D            N calls of rec(D): N*(D+1) returns
//   retprobe threads T N D      T threads, each N calls of rec(D)
//   retprobe tail N             N calls of tailf(i) (a tail call by jmp)
//   retprobe cold N             N calls of hotf(i - N/2): half return
//                               through hotf.cold
//   retprobe sleep N            N calls of sleeper(us), us = 1000 + 500*i,
//                               each call's duration (CLOCK_MONOTONIC)
//                               printed as "call I NS"
//   retprobe longjmp N D M      N times: jumper(D) recurses D deep and
//                               longjmps out of the deepest call; then
//                               M calls of jumper(-1), which return; then
//                               waits for a line on stdin
//   retprobe write N            N write(2)s of one byte to /dev/null
//                               through libc
//   retprobe texit T            T threads each call exiter(), which ends
//                               its thread (pthread_exit) from inside
//   retprobe tailwait N         N calls of tailf, "half", waits for a
//                               line on stdin, N more
//   retprobe fork N D           fork, then parent and child each make N
//                               calls of rec(D)
//   retprobe recwait N D        N calls of rec(D), "half", waits for a
//                               line on stdin, N more
//   retprobe twoway N           N calls of twoway(i % 7)
//   retprobe tiny N [wait]      N calls of tiny() and aftertiny(); with
//                               wait, then "half", waits for a line on
//                               stdin, N more
//
// Every mode ends with "done" and exits 0; a wrong result prints
// "error ..." and exits 1.
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

long rec(long d);
long tailf(long x);
long hotf(long x);
long twoway(long x);
void tiny(void);
long aftertiny(void);

static jmp_buf env;

__attribute__((noinline, noipa)) long jumper(long d) {
	volatile long keep = d;
	if (d < 0)
		return 5;
	if (d == 0)
		longjmp(env, 1);
	return jumper(keep - 1) + 1;
}

__attribute__((noinline, noipa)) long sleeper(long us) {
	struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
	while (nanosleep(&ts, &ts) != 0)
		;
	return us;
}

static long n, d;

__attribute__((noinline, noipa)) long exiter(long x) {
	if (x >= 0)
		pthread_exit(NULL);
	return x;
}

static void *exits(void *arg) {
	exiter((long)arg);
	return NULL;
}

static void fail(const char *what, long got, long want) {
	printf("error %s: %ld, want %ld\n", what, got, want);
	fflush(stdout);
	exit(1);
}

static void *recs(void *arg) {
	for (long i = 0; i < n; i++) {
		long r = rec(d);
		if (r != d + 7)
			fail("rec", r, d + 7);
	}
	return NULL;
}

int main(int argc, char **argv) {
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 3) {
		fprintf(stderr, "usage: retprobe MODE ARGS...\n");
		return 2;
	}
	const char *mode = argv[1];
	if (!strcmp(mode, "rec")) {
		n = atol(argv[2]), d = atol(argv[3]);
		recs(NULL);
	} else if (!strcmp(mode, "threads")) {
		int t = atoi(argv[2]);
		n = atol(argv[3]), d = atol(argv[4]);
		pthread_t th[64];
		for (int i = 0; i < t; i++)
			pthread_create(&th[i], NULL, recs, NULL);
		for (int i = 0; i < t; i++)
			pthread_join(th[i], NULL);
	} else if (!strcmp(mode, "tail")) {
		n = atol(argv[2]);
		for (long i = 0; i < n; i++) {
			long r = tailf(i);
			if (r != i + 101)
				fail("tailf", r, i + 101);
		}
	} else if (!strcmp(mode, "cold")) {
		n = atol(argv[2]);
		for (long i = 0; i < n; i++) {
			long x = i - n / 2, r = hotf(x), want = x >= 0 ? x + 2 : -1;
			if (r != want)
				fail("hotf", r, want);
		}
	} else if (!strcmp(mode, "sleep")) {
		n = atol(argv[2]);
		for (long i = 0; i < n; i++) {
			struct timespec a, b;
			long us = 1000 + 500 * i;
			clock_gettime(CLOCK_MONOTONIC, &a);
			long r = sleeper(us);
			clock_gettime(CLOCK_MONOTONIC, &b);
			if (r != us)
				fail("sleeper", r, us);
			printf("call %ld %ld\n", i, (b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec));
		}
	} else if (!strcmp(mode, "longjmp")) {
		n = atol(argv[2]), d = atol(argv[3]);
		long m = atol(argv[4]);
		volatile long jumps = 0;
		for (long i = 0; i < n; i++) {
			if (setjmp(env) == 0)
				jumper(d);
			jumps++;
		}
		if (jumps != n)
			fail("longjmps", jumps, n);
		for (long i = 0; i < m; i++) {
			long r = jumper(-1);
			if (r != 5)
				fail("jumper", r, 5);
		}
		printf("waiting\n");
		char line[16];
		if (!fgets(line, sizeof line, stdin))
			return 1;
	} else if (!strcmp(mode, "write")) {
		n = atol(argv[2]);
		int fd = open("/dev/null", O_WRONLY);
		for (long i = 0; i < n; i++)
			if (write(fd, "x", 1) != 1)
				fail("write", 0, 1);
	} else if (!strcmp(mode, "texit")) {
		int t = atoi(argv[2]);
		pthread_t th[64];
		for (int i = 0; i < t; i++)
			pthread_create(&th[i], NULL, exits, (void *)(long)i);
		for (int i = 0; i < t; i++)
			pthread_join(th[i], NULL);
	} else if (!strcmp(mode, "tailwait")) {
		n = atol(argv[2]);
		for (long half = 0; half < 2; half++) {
			for (long i = 0; i < n; i++) {
				long r = tailf(i);
				if (r != i + 101)
					fail("tailf", r, i + 101);
			}
			if (half == 0) {
				printf("half\n");
				char line[16];
				if (!fgets(line, sizeof line, stdin))
					return 1;
			}
		}
	} else if (!strcmp(mode, "fork")) {
		n = atol(argv[2]), d = atol(argv[3]);
		pid_t pid = fork();
		recs(NULL);
		if (pid == 0)
			return 0;
		int st;
		waitpid(pid, &st, 0);
		if (st != 0)
			fail("child", st, 0);
	} else if (!strcmp(mode, "recwait")) {
		n = atol(argv[2]), d = atol(argv[3]);
		recs(NULL);
		printf("half\n");
		char line[16];
		if (!fgets(line, sizeof line, stdin))
			return 1;
		recs(NULL);
	} else if (!strcmp(mode, "twoway")) {
		n = atol(argv[2]);
		for (long i = 0; i < n; i++) {
			long x = i % 7, r = twoway(x), want = x == 0 ? 1 : x == 5 ? 3 : 2;
			if (r != want)
				fail("twoway", r, want);
		}
	} else if (!strcmp(mode, "tiny")) {
		n = atol(argv[2]);
		for (long half = 0; half < 2; half++) {
			for (long i = 0; i < n; i++) {
				tiny();
				if (aftertiny() != 9)
					fail("aftertiny", aftertiny(), 9);
			}
			if (half == 0 && argc > 3) {
				printf("half\n");
				char line[16];
				if (!fgets(line, sizeof line, stdin))
					return 1;
			} else
				break;
		}
	} else {
		fprintf(stderr, "retprobe: unknown mode %s\n", mode);
		return 2;
	}
	printf("done\n");
	return 0;
}
