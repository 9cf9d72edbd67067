// The fixture of the stack tests (log ustack): a known call chain through
// recursion. main -> run -> fact(N) -> fact(N-1) -> ... -> fact(0) ->
// leaf. Built with -O2 (gcc's default: no frame pointers, CFI only) and
// with -O2 -fno-omit-frame-pointer; noinline and the volatile reads after
// each call keep every call a real call, never a jump or a loop.
// Usage: fact N ROUNDS [wait]: runs the chain ROUNDS times (with wait,
// once a line is read from stdin), then prints "done SUM".
#include <stdio.h>
#include <stdlib.h>

volatile long sink;

__attribute__((noinline)) long leaf(long n) {
	sink += n;
	return sink;
}

__attribute__((noinline)) long fact(long n) {
	long r;
	if (n == 0)
		r = leaf(1);
	else
		r = n * fact(n - 1);
	sink++;
	return r + sink - sink;
}

__attribute__((noinline)) long run(long n) {
	long r = fact(n);
	sink++;
	return r;
}

int main(int argc, char **argv) {
	long n = argc > 1 ? atol(argv[1]) : 5;
	long rounds = argc > 2 ? atol(argv[2]) : 1;
	long sum = 0;
	if (argc > 3) {
		char line[16];
		if (!fgets(line, sizeof line, stdin))
			return 1;
	}
	for (long i = 0; i < rounds; i++)
		sum += run(n);
	printf("done %ld\n", sum);
	return 0;
}
