// usdtdl LIB: for each line N read from standard input, dlopen LIB, N
// calls of its lib_call (usdtlib.c: lib:call behind its semaphore),
// dlclose; prints "done N enabled E" (E: the calls that found the
// semaphore set). Prints "ready" first.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
	char line[64];
	setvbuf(stdout, NULL, _IONBF, 0);
	printf("ready\n");
	while (fgets(line, sizeof line, stdin)) {
		long n = atol(line), enabled = 0;
		void *h = dlopen(argv[1], RTLD_NOW);
		if (!h) {
			printf("dlopen: %s\n", dlerror());
			return 1;
		}
		long (*call)(long) = (long (*)(long))dlsym(h, "lib_call");
		for (long i = 0; i < n; i++)
			enabled += call(i);
		dlclose(h);
		printf("done %ld enabled %ld\n", n, enabled);
	}
	return 0;
}
