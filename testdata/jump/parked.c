// A thread parked in a signal handler, as the safepoints of Boehm's,
// Mono's and the JVMs' garbage collectors park threads: the handler
// waits until released, then returns to the interrupted instruction.
//
// Usage: parked segv|nested N THREADS. The first thread calls g_load on a
// protected page: SIGSEGV at g_load+3. segv: its handler parks. nested:
// its handler raises SIGUSR2, whose handler runs on an alternate signal
// stack and parks there (the SIGSEGV frame stays on the thread's stack).
// The main thread prints "parked" once it is, reads a line from stdin,
// makes the page readable and releases the handler, which returns: the
// load runs again and succeeds. Meanwhile the other threads call g_load
// N times each on a good page and check every result. Prints "bad B
// calls C faults F" and exits 1 when a result was wrong.
#define _GNU_SOURCE
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int g_load(int *p);

static int *page;
static sem_t parked, release;
static volatile int nested, faults;
static long n;
static long bad[64], calls[64];

static void park(void) {
	sem_post(&parked);
	while (sem_wait(&release) != 0)
		;
}

static void on_usr2(int sig) { park(); }

static void on_segv(int sig, siginfo_t *si, void *uc) {
	faults++;
	if ((int *)si->si_addr != page)
		_exit(3);
	if (nested)
		raise(SIGUSR2);
	else
		park();
}

static void *parker(void *arg) {
	// runs on the alternate stack when nested
	stack_t ss = {0};
	ss.ss_size = 64 << 10;
	ss.ss_sp = mmap(NULL, ss.ss_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	sigaltstack(&ss, NULL);
	int r = g_load(page); // faults, parks, and loads once released
	if (r != 42 + 1)
		bad[0]++;
	calls[0]++;
	return NULL;
}

static void *worker(void *arg) {
	long t = (long)arg;
	int v[1];
	for (long i = 0; i < n; i++) {
		v[0] = (int)(i * 7 + t);
		if (g_load(v) != v[0] + 1)
			bad[t]++;
		calls[t]++;
	}
	return NULL;
}

int main(int argc, char **argv) {
	if (argc < 4) {
		fprintf(stderr, "usage: parked segv|nested N THREADS\n");
		return 2;
	}
	nested = !strcmp(argv[1], "nested");
	n = atol(argv[2]);
	int threads = atoi(argv[3]);
	setvbuf(stdout, NULL, _IONBF, 0);
	page = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	sem_init(&parked, 0, 0);
	sem_init(&release, 0, 0);
	struct sigaction sa = {0};
	sa.sa_sigaction = on_segv;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	sigaction(SIGSEGV, &sa, NULL);
	struct sigaction su = {0};
	su.sa_handler = on_usr2;
	su.sa_flags = SA_ONSTACK;
	sigaction(SIGUSR2, &su, NULL);
	pthread_t th[64];
	pthread_create(&th[0], NULL, parker, NULL);
	while (sem_wait(&parked) != 0)
		;
	printf("parked\n");
	char line[16];
	if (!fgets(line, sizeof line, stdin))
		return 4;
	for (long t = 1; t < threads; t++)
		pthread_create(&th[t], NULL, worker, (void *)t);
	for (long t = 1; t < threads; t++)
		pthread_join(th[t], NULL);
	mprotect(page, 4096, PROT_READ | PROT_WRITE);
	page[0] = 42;
	sem_post(&release);
	pthread_join(th[0], NULL);
	long b = 0, c = 0;
	for (long t = 0; t < threads; t++) {
		b += bad[t];
		c += calls[t];
	}
	printf("bad %ld calls %ld faults %d\n", b, c, faults);
	return b != 0 || faults != 1;
}
