// reload LIB ROUNDS N DIR: ROUNDS times, once DIR/go.R exists, dlopen LIB
// (rebuilt between rounds by the test), call its plug(i) N times, check
// the sum, dlclose it. Then wait for DIR/end, and exit 0 when every round
// was right, 1 when not.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void waitfile(const char *dir, const char *name) {
	char p[4096];
	struct stat st;
	snprintf(p, sizeof p, "%s/%s", dir, name);
	while (stat(p, &st) != 0) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
}

int main(int argc, char **argv) {
	if (argc != 5) return 2;
	long rounds = atol(argv[2]), n = atol(argv[3]), bad = 0;
	printf("pid %d\n", getpid());
	fflush(stdout);
	for (long r = 0; r < rounds; r++) {
		char name[32];
		snprintf(name, sizeof name, "go.%ld", r);
		waitfile(argv[4], name);
		void *h = dlopen(argv[1], RTLD_NOW);
		if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 3; }
		long (*plug)(long) = (long (*)(long))dlsym(h, "plug");
		long sum = 0;
		for (long i = 0; i < n; i++) sum += plug(i);
		if (sum != n * (n - 1) / 2 * 3) bad++;
		printf("round %ld sum %ld\n", r, sum);
		fflush(stdout);
		dlclose(h);
	}
	waitfile(argv[4], "end");
	return bad ? 1 : 0;
}
