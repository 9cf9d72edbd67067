// The process the coredump tests dump: three threads, a global string that
// only exists at run time, a heap buffer with a known pattern, a PROT_NONE
// guard mapping, a file mapping longer than its file (its last pages cannot
// be read), an anonymous "secret" mapping, and known values in r12/r13 of
// each worker thread while it sleeps. It prints "tick N" forever, so a test
// can see it keep running after the dump.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

char global_string[64];
uint64_t *heap_ptr;
volatile long ticks;
int started[3];
char *guard, *short_map, *secret;

// worker sleeps in a raw nanosleep with r12 = 0x7e570000+id and
// r13 = ~r12, so that a stopped worker shows them in its registers.
static void *worker(void *arg) {
	long id = (long)arg;
	struct timespec ts = {0, 2000000};
	for (;;) {
		long ret;
		__asm__ volatile("mov %[v], %%r12\n\t"
				 "mov %[w], %%r13\n\t"
				 "syscall"
				 : "=a"(ret)
				 : "a"((long)SYS_nanosleep), "D"(&ts), "S"(0L),
				   [v] "r"(0x7e570000L + id), [w] "r"(~(0x7e570000L + id))
				 : "r12", "r13", "rcx", "r11", "memory");
		__atomic_store_n(&started[id], 1, __ATOMIC_RELEASE);
	}
	return NULL;
}

int main(int argc, char **argv) {
	long page = sysconf(_SC_PAGESIZE);
	if (argc < 2) {
		fprintf(stderr, "usage: target DATAFILE\n");
		return 2;
	}
	snprintf(global_string, sizeof global_string, "gprobes core test, pid %d", (int)getpid());
	heap_ptr = malloc(4096);
	for (int i = 0; i < 512; i++)
		heap_ptr[i] = 0x1122334400000000ULL + i;
	guard = mmap(NULL, 2 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	secret = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	memset(secret, 'S', 2 * page);
	int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
	char *buf = malloc(page);
	memset(buf, 'F', page);
	if (fd < 0 || write(fd, buf, page) != page) {
		perror(argv[1]);
		return 1;
	}
	short_map = mmap(NULL, 3 * page, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (guard == MAP_FAILED || secret == MAP_FAILED || short_map == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	pthread_t t[2];
	for (long i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, worker, (void *)(i + 1));
	// ready only once both workers sleep with their values in r12/r13
	while (!__atomic_load_n(&started[1], __ATOMIC_ACQUIRE) || !__atomic_load_n(&started[2], __ATOMIC_ACQUIRE))
		usleep(100);
	printf("ready string=%p heap=%p ticks=%p guard=%p short=%p secret=%p\n", (void *)global_string,
	       (void *)heap_ptr, (void *)&ticks, guard, short_map, secret);
	fflush(stdout);
	for (;;) {
		ticks++;
		printf("tick %ld\n", ticks);
		fflush(stdout);
		usleep(5000);
	}
}
