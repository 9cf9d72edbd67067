// A process of the host target's tests (global_linux_test.go), using
// libglob.so's glob_fn. "globuser N": N calls, then exits. "globuser":
// reads lines from standard input, each a number N: N calls of glob_fn(i),
// then "done S" (the sum of the results); ends at end of input.
#include <stdio.h>
#include <stdlib.h>

long glob_fn(long a);
extern const char glob_name[];

static long calls(long n) {
	long s = 0;
	for (long i = 0; i < n; i++)
		s += glob_fn(i);
	return s;
}

int main(int argc, char **argv) {
	// glob_name's page read in: an eBPF program cannot fault it in
	if (glob_name[0] != 'l')
		return 9;
	if (argc > 1) {
		printf("done %ld\n", calls(atol(argv[1])));
		return 0;
	}
	char line[64];
	setvbuf(stdout, NULL, _IONBF, 0);
	printf("ready\n");
	while (fgets(line, sizeof line, stdin))
		printf("done %ld\n", calls(atol(line)));
	return 0;
}
