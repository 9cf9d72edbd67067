// The fixture of the engine's tests: calls probed functions a known
// number of times and prints a checksum of their results, so a test can
// check exact hit counts and that probing changed no result.
//
//   hits [-n N] [-t THREADS] [-f] [-d LIB] [-s MS] [-w]
//     -n N        calls of each function per thread (default 1000)
//     -t T        threads calling them (default 1: the main thread)
//     -f          fork first: the child does the same work
//     -d LIB      dlopen LIB after the first round and call its plug(i, s)
//     -s MS       sleep MS milliseconds before starting (time to insert)
//     -w          wait for a line on stdin before starting
//     -l          loop until killed, printing a line per round
//     -p MS       pause MS milliseconds between rounds of -l
//     -x N        make N calls of f_load whose first instruction faults
//                 (a NULL string), recovered by a SIGSEGV handler
#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

long f_push(long a, const char *s);
long f_load(long a, const char *s);
long f_rip(long a, const char *s);
long f_branch(long a, const char *s);
long f_call(long a, const char *s);
long f_boost(long a, const char *s);
long f_step(long a, const char *s);
long f_icall(long a, const char *s, long (*fn)(long, const char *));
extern long counter, counter2;

__attribute__((noinline)) long probed(long i, const char *s) {
	// a C function for probes by name and by source line
	long r = i * 7;
	r += (long)strlen(s);
	return r;
}

static long n = 1000;
static sigjmp_buf recover;
static void onsegv(int sig) { siglongjmp(recover, 1); }
static volatile long alarms, alarmsTkill;
static void onalrm(int sig, siginfo_t *si, void *uc) {
	alarms++;
	if (si->si_code == SI_TKILL) alarmsTkill++;
}
static const char *words[] = {"alpha", "beta", "gamma", ""};

static void *work(void *arg) {
	long sum = 0;
	for (long i = 0; i < n; i++) {
		const char *w = words[i % 4];
		sum += probed(i, w);
		sum += f_push(i, w) + f_load(i, w) + f_rip(i, w) + f_branch(i, w) + f_call(i, w);
		sum += f_boost(i, w) + f_step(i, w) + f_icall(i, w, f_load);
	}
	return (void *)sum;
}

int main(int argc, char **argv) {
	int threads = 1, forkit = 0, loop = 0, waitin = 0;
	long sleepms = 0, pausems = 0, faults = 0, alarmus = 0;
	const char *lib = NULL;
	int c;
	while ((c = getopt(argc, argv, "n:t:fd:s:wlp:x:a:")) != -1) {
		switch (c) {
		case 'n': n = atol(optarg); break;
		case 't': threads = atoi(optarg); break;
		case 'f': forkit = 1; break;
		case 'd': lib = optarg; break;
		case 's': sleepms = atol(optarg); break;
		case 'w': waitin = 1; break;
		case 'l': loop = 1; break;
		case 'p': pausems = atol(optarg); break;
		case 'x': faults = atol(optarg); break;
		case 'a': alarmus = atol(optarg); break;
		default: return 2;
		}
	}
	printf("pid %d\n", getpid());
	fflush(stdout);
	if (waitin) {
		char buf[16];
		if (!fgets(buf, sizeof buf, stdin)) return 3;
	}
	if (sleepms) {
		struct timespec ts = {sleepms / 1000, (sleepms % 1000) * 1000000};
		nanosleep(&ts, NULL);
	}
	if (faults) {
		long recovered = 0;
		signal(SIGSEGV, onsegv);
		for (long i = 0; i < faults; i++) {
			if (sigsetjmp(recover, 1) == 0)
				f_load(i, NULL);
			else
				recovered++;
		}
		printf("faults %ld recovered %ld\n", faults, recovered);
		fflush(stdout);
	}
	if (alarmus) {
		struct sigaction sa = {0};
		sa.sa_sigaction = onalrm;
		sa.sa_flags = SA_SIGINFO | SA_RESTART;
		sigaction(SIGALRM, &sa, NULL);
		struct itimerval it = {{0, alarmus}, {0, alarmus}};
		setitimer(ITIMER_REAL, &it, NULL);
	}
	pid_t child = 0;
	if (forkit) {
		child = fork();
		if (child < 0) return 4;
	}
	do {
		long total = 0;
		pthread_t tids[64];
		if (threads > 1) {
			for (int i = 0; i < threads && i < 64; i++) pthread_create(&tids[i], NULL, work, NULL);
			for (int i = 0; i < threads && i < 64; i++) {
				void *r;
				pthread_join(tids[i], &r);
				total += (long)r;
			}
		} else {
			total = (long)work(NULL);
		}
		if (lib) {
			void *h = dlopen(lib, RTLD_NOW);
			if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 5; }
			long (*plug)(long, const char *) = (long (*)(long, const char *))dlsym(h, "plug");
			for (long i = 0; i < n; i++) total += plug(i, words[i % 4]);
		}
		printf("%s %d checksum %ld counter %ld counter2 %ld\n", child == 0 && forkit ? "child" : "main", getpid(), total, counter, counter2);
		fflush(stdout);
		if (pausems) {
			struct timespec ts = {pausems / 1000, (pausems % 1000) * 1000000};
			nanosleep(&ts, NULL);
		}
	} while (loop);
	if (alarmus) {
		struct itimerval off = {{0, 0}, {0, 0}};
		setitimer(ITIMER_REAL, &off, NULL);
		printf("alarms %ld tkill %ld\n", alarms, alarmsTkill);
		fflush(stdout);
	}
	if (child > 0) {
		int st;
		waitpid(child, &st, 0);
		return WEXITSTATUS(st);
	}
	return 0;
}
