// A process tree for the kernel target's process following: the process
// starts -c children, each of which starts a grandchild, and a thread; every
// process and thread calls getppid(2) -n times. Each process prints
// "pid P" when it starts its calls, so a test knows which processes it
// should have counted.
//
//   forktree [-c CHILDREN] [-n CALLS]
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static long calls = 10;

static void *thread(void *arg) {
	for (long i = 0; i < calls; i++) syscall(SYS_getppid);
	return NULL;
}

// work: print the pid, call getppid from this thread and from a new one
static void work(void) {
	printf("pid %d\n", getpid());
	fflush(stdout);
	pthread_t t;
	pthread_create(&t, NULL, thread, NULL);
	for (long i = 0; i < calls; i++) syscall(SYS_getppid);
	pthread_join(t, NULL);
}

int main(int argc, char **argv) {
	int children = 2, c;
	while ((c = getopt(argc, argv, "c:n:")) != -1) {
		switch (c) {
		case 'c': children = atoi(optarg); break;
		case 'n': calls = atol(optarg); break;
		default: return 2;
		}
	}
	for (int i = 0; i < children; i++) {
		if (fork() == 0) {
			if (fork() == 0) {
				work();
				return 0;
			}
			work();
			wait(NULL);
			return 0;
		}
	}
	work();
	while (wait(NULL) > 0)
		;
	return 0;
}
