// A program under seccomp (ptrace/seccomp_test.go), with the functions of
// testdata/harm/funcs.S: f_lock (a lock add to total, stepped out of
// line) and f_push (3 * its argument, a push first).
//
// Usage: seccomp strict|kill-mmap|kill-openat N THREADS. Every thread is
// started first; then strict: each thread enters seccomp strict mode
// (read, write, exit, sigreturn only); kill-mmap or kill-openat: a filter
// that kills the process on mmap or openat and allows the rest is put on
// every thread (TSYNC). It prints "ready", waits for a line on stdin, and
// each thread calls f_lock and f_push N times, checking f_push. Every
// thread writes "thread T bad B"; the last one "total X" (f_lock's
// count, which must be THREADS * N). strict ends with exit(2) of each
// thread (exit_group is not allowed), so the status is 0 unless a result
// was wrong (then a thread's exit status is 1, the process's too).
#define _GNU_SOURCE
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

long f_lock(void);
long f_push(long);
extern long total;

static long n;
static int threads, strict;
static volatile int ready, go, done;
static int kill_nr;

static void say(const char *s) {
	write(1, s, strlen(s));
}

static void enter(void) {
	if (strict) {
		if (syscall(SYS_prctl, PR_SET_SECCOMP, SECCOMP_MODE_STRICT, 0, 0, 0) != 0)
			_exit(5);
	}
	__atomic_add_fetch(&ready, 1, __ATOMIC_SEQ_CST);
}

static void *worker(void *arg) {
	long t = (long)arg;
	if (t > 0)
		enter();
	while (!go)
		;
	long bad = 0;
	for (long i = 0; i < n; i++) {
		f_lock();
		if (f_push(i) != 3 * i)
			bad++;
	}
	char buf[64];
	snprintf(buf, sizeof buf, "thread %ld bad %ld\n", t, bad);
	say(buf);
	if (__atomic_add_fetch(&done, 1, __ATOMIC_SEQ_CST) == threads) {
		snprintf(buf, sizeof buf, "total %ld\n", total);
		say(buf);
		if (total != (long)threads * n)
			bad++;
	}
	if (strict)
		syscall(SYS_exit, bad != 0);
	return (void *)bad;
}

int main(int argc, char **argv) {
	if (argc < 4) {
		fprintf(stderr, "usage: seccomp strict|kill-mmap|kill-openat N THREADS\n");
		return 2;
	}
	strict = !strcmp(argv[1], "strict");
	if (!strcmp(argv[1], "kill-mmap"))
		kill_nr = SYS_mmap;
	else if (!strcmp(argv[1], "kill-openat"))
		kill_nr = SYS_openat;
	else if (!strict)
		return 2;
	n = atol(argv[2]);
	threads = atoi(argv[3]);
	pthread_t th[64];
	for (long t = 1; t < threads; t++)
		pthread_create(&th[t], NULL, worker, (void *)t);
	if (!strict) {
		struct sock_filter f[] = {
			BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
			BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kill_nr, 0, 1),
			BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
			BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		};
		struct sock_fprog prog = {sizeof f / sizeof f[0], f};
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
		    syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) != 0) {
			perror("seccomp");
			return 6;
		}
		ready = threads - 1;
	}
	while (ready < threads - 1)
		;
	enter();
	say("ready\n");
	char line[16];
	if (read(0, line, sizeof line) <= 0)
		syscall(SYS_exit, 4);
	go = 1;
	if (strict)
		worker((void *)0); // exits the thread
	long bad = (long)worker((void *)0);
	for (long t = 1; t < threads; t++) {
		void *r;
		pthread_join(th[t], &r);
		bad += (long)r;
	}
	return bad != 0;
}
