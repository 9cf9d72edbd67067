// A process with static probes (sys/sdt.h) for the host target's USDT
// tests (usdt_linux_test.go). Reads lines from standard input, each a
// number N: N rounds of app:tick (arguments i, -i, a string; no
// semaphore), app:more (an int -i and a short i-2 in registers of their
// width, 5i in memory on the stack) and of guarded(i) (usdtguard.c: app:guarded, behind its
// semaphore); then "done N enabled E" (E: the rounds that found the
// semaphore set).
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>

long guarded(long i);

int main(void) {
	char line[64], buf[32] = "usdt-arg";
	setvbuf(stdout, NULL, _IONBF, 0);
	printf("ready\n");
	while (fgets(line, sizeof line, stdin)) {
		long n = atol(line), enabled = 0;
		for (long i = 0; i < n; i++) {
			volatile long v = i * 5;
			STAP_PROBE3(app, tick, i, -i, buf);
			STAP_PROBE3(app, more, (int)-i, (short)(i - 2), v);
			enabled += guarded(i);
		}
		printf("done %ld enabled %ld\n", n, enabled);
	}
	return 0;
}
