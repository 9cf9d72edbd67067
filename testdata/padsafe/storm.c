// The fixture of the jump pads' safety tests (ptrace/padsafe_test.go,
// cmd/gprobes): threads call probed functions whose first instructions a
// jump pad relocates, under a storm of signals, and the program checks
// its own results, so a probe that ran an instruction twice, wrote where
// the program keeps data, trapped, or lost or changed a signal shows as a
// wrong count or a death.
//
//   storm [-t T] [-n N] [-r HZ] [-q HZ] [-g FILE] [-s FILE] [-e FILE] [-T] [-S]
//     -t T     worker threads (default 4)
//     -n N     calls of each function per thread (default 100000)
//     -r HZ    a timer per worker thread firing SIGALRM at it HZ times a
//              second (timer_create, SIGEV_THREAD_ID: it hits the thread
//              wherever it is, inside a pad included)
//     -q HZ    a sender thread queues HZ real-time signals a second to the
//              workers, each with its own value (pthread_sigqueue); every
//              one must arrive once, with SI_QUEUE and its value
//     -L N     up to N of them may not arrive (a tracer killed with SIGKILL
//              loses the signal a thread is stopped for: the kernel's
//              doing, with any tracer); none may arrive twice or changed
//     -g FILE  wait until FILE exists before the workers start
//     -s FILE  create FILE once every worker has made its first call
//     -e FILE  stop calling once FILE exists (-n is then only a bound)
//     -T       the process traps rdtsc (prctl PR_SET_TSC, PR_TSC_SIGSEGV)
//              and emulates its own rdtsc in a SIGSEGV handler, as record
//              and replay tools do: every fault must be one of its own
//     -S       also run a thread with a 16 KiB stack that calls f_leaf
//              with about 1 KiB of stack left, and from a SIGUSR1 handler
//              on a 4 KiB sigaltstack; the bytes around the alternate
//              stack must stay as they were, and deep D says how far below
//              f_leaf's rsp anything wrote (f_leaf itself: 16, its red zone)
//
// Prints "calls C bad B alarms A rt GOT/SENT tsc OWN/FAULTS foreign F
// deep D alt ALTROOM" and exits 0 when every count is exact and nothing
// foreign happened, 1 otherwise.
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

long f_call(long);
long f_leaf(long);
long leaf_loop(long n, uintptr_t *sp);
long own_rdtsc(void);
extern char own_rdtsc_at[];

__thread long gcalls;
__attribute__((noinline)) long g_count(long x) {
	gcalls++;
	return 2 * x;
}

// a call among the covered bytes of plain compiled C (sub $8,%rsp; call)
__attribute__((noinline)) long h_call(long x) { return g_count(x) + 1; }

#define MAXT 64
static long nthreads = 4, n = 100000, hz, qhz;
static int trap_tsc, small_stack;
static const char *gate, *started, *stop;
static volatile int first, stopping, finished, senderdone;
static long calls[MAXT], bad[MAXT], alarms[MAXT];
static pthread_t tids[MAXT];

static __thread int me = -1;
static long rtgot[MAXT], rtsum[MAXT], rtsent[MAXT], rtsentsum[MAXT], rtbad;
static volatile int rtbadcode, rtbadpid, rtbadme;
// each value's arrivals (values below MAXV)
#define MAXV (1 << 24)
static unsigned char *arrived;
static long rtlostok, rtdup;
static long tscown[MAXT], tscfault[MAXT], foreign;

static int exists(const char *path) {
	struct stat st;
	return stat(path, &st) == 0;
}

static void nap(long us) {
	struct timespec ts = {0, us * 1000};
	nanosleep(&ts, NULL);
}

static void on_alarm(int sig) {
	(void)sig;
	if (me >= 0) alarms[me]++;
}

static void on_rt(int sig, siginfo_t *si, void *uc) {
	(void)sig, (void)uc;
	if (me < 0 || si->si_code != SI_QUEUE) {
		if (__sync_add_and_fetch(&rtbad, 1) == 1) {
			rtbadcode = si->si_code;
			rtbadpid = si->si_pid;
			rtbadme = me;
		}
		return;
	}
	rtgot[me]++;
	rtsum[me] += si->si_value.sival_int;
	unsigned v = (unsigned)si->si_value.sival_int;
	if (v < MAXV && arrived[v]++ != 0) __sync_add_and_fetch(&rtdup, 1);
}

// rdtsc trapped (-T): emulate our own, count any other as foreign
static void on_segv(int sig, siginfo_t *si, void *ucp) {
	(void)sig, (void)si;
	ucontext_t *uc = ucp;
	unsigned char *pc = (unsigned char *)uc->uc_mcontext.gregs[REG_RIP];
	if (pc[0] == 0x0f && pc[1] == 0x31) {
		if ((char *)pc == own_rdtsc_at && me >= 0) tscfault[me]++;
		else __sync_add_and_fetch(&foreign, 1);
		struct timespec ts; // not the vDSO's: it reads the TSC
		syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
		uint64_t v = (uint64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
		uc->uc_mcontext.gregs[REG_RAX] = (uint32_t)v;
		uc->uc_mcontext.gregs[REG_RDX] = v >> 32;
		uc->uc_mcontext.gregs[REG_RIP] += 2;
		return;
	}
	// anything else: die as the fault would have killed us
	signal(SIGSEGV, SIG_DFL);
}

static void *work(void *arg) {
	me = (int)(long)arg;
	// the signals main blocked before making the threads: they wait for
	// me (a real-time signal queued to this thread before it runs here
	// stays pending until now)
	sigset_t storm;
	sigemptyset(&storm);
	sigaddset(&storm, SIGALRM);
	sigaddset(&storm, SIGRTMIN);
	pthread_sigmask(SIG_UNBLOCK, &storm, NULL);
	if (hz > 0) {
		struct sigevent sev = {0};
		sev.sigev_notify = SIGEV_THREAD_ID;
		sev.sigev_signo = SIGALRM;
		sev._sigev_un._tid = syscall(SYS_gettid);
		timer_t t;
		if (timer_create(CLOCK_MONOTONIC, &sev, &t) != 0) {
			perror("timer_create");
			exit(2);
		}
		long ns = 1000000000L / hz;
		struct itimerspec its = {{0, ns}, {0, ns}};
		timer_settime(t, 0, &its, NULL);
	}
	long i;
	for (i = 0; i < n && !stopping; i++) {
		if (f_call(i) != 2 * i + 1) bad[me]++;
		if (h_call(i) != 2 * i + 1) bad[me]++;
		if (f_leaf(i) != 3 * i) bad[me]++;
		if (trap_tsc && i % 64 == 0) {
			own_rdtsc();
			tscown[me]++;
		}
		if (i == 0 && __sync_add_and_fetch(&first, 1) == nthreads && started) {
			FILE *f = fopen(started, "w");
			if (f) fclose(f);
		}
	}
	// block the storm before the counts are read
	sigset_t all;
	sigfillset(&all);
	sigdelset(&all, SIGSEGV);
	calls[me] = i;
	if (gcalls != 2 * i) bad[me]++;
	__sync_add_and_fetch(&finished, 1);
	// stay to take the real-time signals still queued to us
	while (!senderdone) nap(1000);
	for (int k = 0; k < (rtlostok ? 500 : 5000) && rtgot[me] < rtsent[me]; k++) nap(1000);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	return NULL;
}

static void *sender(void *arg) {
	(void)arg;
	long gap = 1000000000L / qhz;
	struct timespec next;
	clock_gettime(CLOCK_MONOTONIC, &next);
	for (int v = 1; finished < nthreads && v < MAXV; v++) {
		int w = v % nthreads;
		union sigval val = {.sival_int = v};
		int err = pthread_sigqueue(tids[w], SIGRTMIN, val);
		if (err == 0) {
			__sync_add_and_fetch(&rtsent[w], 1);
			__sync_add_and_fetch(&rtsentsum[w], v);
		} else if (err != EAGAIN) {
			break;
		}
		next.tv_nsec += gap;
		if (next.tv_nsec >= 1000000000) {
			next.tv_nsec -= 1000000000;
			next.tv_sec++;
		}
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
	}
	senderdone = 1;
	return NULL;
}

// -S: the 16 KiB stack thread and the 4 KiB alternate stack
#define PAINT 0xa5
static long deep = -1, altroom = -1, altbad, smallbad;
static char *altbuf;
static size_t altsize;
static uintptr_t alt_r;

static void on_usr1(int sig) {
	(void)sig;
	uintptr_t r;
	if (leaf_loop(100, &r) != 0) smallbad++;
	alt_r = r;
	if (f_call(7) != 15) smallbad++;
}

// with about 1 KiB of stack left: paint what is below, call f_leaf, see
// how deep anything wrote (no library call here: a lazy binding alone
// needs more stack than that)
__attribute__((noinline)) static void near_the_end(uintptr_t bottom) {
	uintptr_t r;
	// where f_leaf's frame is (the same for every call from here); it
	// writes 16 bytes below its rsp, into its red zone
	if (leaf_loop(1, &r) != 0) smallbad++;
	uintptr_t top = r - 16;
	for (volatile unsigned char *p = (unsigned char *)bottom; (uintptr_t)p < top; p++) *p = PAINT;
	if (leaf_loop(n < 100000 ? n : 100000, &r) != 0) smallbad++;
	volatile unsigned char *low = (unsigned char *)bottom;
	while ((uintptr_t)low < top && *low == PAINT) low++;
	deep = (long)(r - (uintptr_t)low);
}

__attribute__((noinline)) static void leave(uintptr_t bottom, size_t use) {
	volatile char *fill = alloca(use);
	fill[0] = 0;
	near_the_end(bottom);
	fill[1] = 0;
}

static void *small(void *arg) {
	(void)arg;
	sigset_t all;
	sigfillset(&all);
	sigdelset(&all, SIGUSR1);
	sigdelset(&all, SIGSEGV);
	pthread_sigmask(SIG_SETMASK, &all, NULL);
	pthread_attr_t a;
	void *lo;
	size_t sz;
	pthread_getattr_np(pthread_self(), &a);
	pthread_attr_getstack(&a, &lo, &sz);
	char here;
	uintptr_t bottom = (uintptr_t)lo, sp = (uintptr_t)&here;
	const size_t left = 1024 + 256;
	if (sp - bottom < left + 512) {
		fprintf(stderr, "small stack: only %zu bytes\n", (size_t)(sp - bottom));
		exit(2);
	}
	leave(bottom, sp - bottom - left);
	// f_leaf from a handler on a 4 KiB alternate stack
	for (int k = 0; k < 1000; k++) raise(SIGUSR1);
	return NULL;
}

static void setup_small(void) {
	long minsig = (long)getauxval(AT_MINSIGSTKSZ);
	altsize = 4096;
	while ((long)altsize < minsig + 768) altsize += 1024;
	altbuf = mmap(NULL, altsize + 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	memset(altbuf, PAINT, altsize + 8192);
	struct sigaction sa = {0};
	sa.sa_handler = on_usr1;
	sa.sa_flags = SA_ONSTACK;
	sigaction(SIGUSR1, &sa, NULL);
}

// sigaltstack applies to the calling thread: the small one's own
static void *small_main(void *arg) {
	stack_t ss = {.ss_sp = altbuf + 4096, .ss_size = altsize};
	if (sigaltstack(&ss, NULL) != 0) {
		perror("sigaltstack");
		exit(2);
	}
	return small(arg);
}

static int alt_intact(void) {
	for (size_t i = 0; i < 4096; i++)
		if ((unsigned char)altbuf[i] != PAINT || (unsigned char)altbuf[4096 + altsize + i] != PAINT) return 0;
	return 1;
}

int main(int argc, char **argv) {
	int c;
	arrived = calloc(MAXV, 1);
	while ((c = getopt(argc, argv, "t:n:r:q:g:s:e:L:TS")) != -1) {
		switch (c) {
		case 't': nthreads = atol(optarg); break;
		case 'n': n = atol(optarg); break;
		case 'r': hz = atol(optarg); break;
		case 'q': qhz = atol(optarg); break;
		case 'g': gate = optarg; break;
		case 's': started = optarg; break;
		case 'e': stop = optarg; break;
		case 'L': rtlostok = atol(optarg); break;
		case 'T': trap_tsc = 1; break;
		case 'S': small_stack = 1; break;
		default: return 2;
		}
	}
	if (nthreads < 1 || nthreads > MAXT) return 2;
	printf("pid %d\n", getpid());
	fflush(stdout);
	struct sigaction sa = {0};
	sa.sa_handler = on_alarm;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGALRM, &sa, NULL);
	sa.sa_handler = NULL;
	sa.sa_sigaction = on_rt;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigaction(SIGRTMIN, &sa, NULL);
	if (trap_tsc) {
		if (prctl(PR_SET_TSC, PR_TSC_SIGSEGV, 0, 0, 0) != 0) {
			perror("PR_SET_TSC");
			return 2;
		}
		sa.sa_sigaction = on_segv;
		sa.sa_flags = SA_SIGINFO | SA_NODEFER;
		sigaction(SIGSEGV, &sa, NULL);
	}
	while (gate && !exists(gate)) nap(1000);
	// the storm's signals reach a thread only once it knows who it is
	sigset_t storm;
	sigemptyset(&storm);
	sigaddset(&storm, SIGALRM);
	sigaddset(&storm, SIGRTMIN);
	pthread_sigmask(SIG_BLOCK, &storm, NULL);
	pthread_t st = 0;
	if (small_stack) {
		setup_small();
		pthread_attr_t a;
		pthread_attr_init(&a);
		if (pthread_attr_setstacksize(&a, 16384) != 0) {
			fprintf(stderr, "a 16 KiB stack is refused\n");
			return 2;
		}
		pthread_create(&st, &a, small_main, NULL);
	}
	for (long i = 0; i < nthreads; i++) pthread_create(&tids[i], NULL, work, (void *)i);
	pthread_t sq = 0;
	if (qhz > 0) pthread_create(&sq, NULL, sender, NULL);
	else senderdone = 1;
	if (stop) {
		while (finished < nthreads && !exists(stop)) nap(1000);
		stopping = 1;
	}
	for (long i = 0; i < nthreads; i++) pthread_join(tids[i], NULL);
	if (sq) pthread_join(sq, NULL);
	if (st) pthread_join(st, NULL);
	long total = 0, wrong = 0, al = 0, got = 0, sent = 0, own = 0, faults = 0;
	for (long i = 0; i < nthreads; i++) {
		total += calls[i];
		wrong += bad[i];
		al += alarms[i];
		got += rtgot[i];
		sent += rtsent[i];
		if (rtgot[i] > rtsent[i] || (rtlostok == 0 && (rtgot[i] != rtsent[i] || rtsum[i] != rtsentsum[i]))) wrong++;
		own += tscown[i];
		faults += tscfault[i];
	}
	wrong += rtbad + rtdup;
	if (sent - got > rtlostok) wrong++;
	if (trap_tsc && own != faults) wrong++;
	wrong += foreign;
	if (small_stack) {
		wrong += smallbad;
		if (!alt_intact()) {
			altbad = 1;
			wrong++;
		}
		altroom = alt_r ? (long)(alt_r - (uintptr_t)(altbuf + 4096)) : -1;
		if (deep < 0 || altroom < 0) wrong++;
	}
	printf("calls %ld bad %ld alarms %ld rt %ld/%ld tsc %ld/%ld foreign %ld deep %ld alt %ld altbad %ld rtdup %ld\n",
	       total, wrong, al, got, sent, own, faults, foreign, deep, altroom, altbad, rtdup);
	if (rtbad) printf("real-time signals with another siginfo: %ld (the first: si_code %d, si_pid %d, thread %d)\n", rtbad, rtbadcode, rtbadpid, rtbadme);
	fflush(stdout);
	return wrong == 0 ? 0 : 1;
}
