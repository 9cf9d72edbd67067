// The fixture of the stack tests (log ustack): a known call chain through
// recursion. main -> run -> fact(N) -> fact(N-1) -> ... -> fact(0) ->
// leaf. Built with -O2 (gcc's default: no frame pointers, CFI only) and
// with -O2 -fno-omit-frame-pointer; noinline and the volatile reads after
// each call keep every call a real call, never a jump or a loop.
// Usage: fact N ROUNDS [wait|getppid|signal]: runs the chain ROUNDS
// times, then prints "done SUM". With wait, once a line is read from
// stdin; with getppid, leaf also calls getppid(2) (a tracepoint's hit,
// for the kernel target), and the program reads a line before the chain
// and another before it exits (the test reads the records meanwhile);
// with signal, fact(0) sends itself SIGUSR1 with kill(2), whose handler
// (handler) runs on the stack below kill's frame.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <signal.h>

volatile long sink;
static int use_getppid, use_signal;

__attribute__((noinline)) void handler(int sig) {
	sink += sig;
}

__attribute__((noinline)) long leaf(long n) {
	if (use_getppid)
		sink += getppid();
	sink += n;
	return sink;
}

__attribute__((noinline)) long fact(long n) {
	long r;
	if (n == 0) {
		if (use_signal)
			kill(getpid(), SIGUSR1);
		r = leaf(1);
	}
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
	char line[16];
	use_getppid = argc > 3 && strcmp(argv[3], "getppid") == 0;
	use_signal = argc > 3 && strcmp(argv[3], "signal") == 0;
	if (use_signal)
		signal(SIGUSR1, handler);
	if (argc > 3 && !use_signal && !fgets(line, sizeof line, stdin))
		return 1;
	for (long i = 0; i < rounds; i++)
		sum += run(n);
	printf("done %ld\n", sum);
	fflush(stdout);
	if (use_getppid && !fgets(line, sizeof line, stdin))
		return 1;
	return 0;
}
