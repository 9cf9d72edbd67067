// A process for the uprobe test (uprobe_linux_test.go): calls probed(i,
// 1000+i, "hello, uprobe") N times.
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) long probed(long a, long b, const char *s) {
	__asm__ volatile("" ::: "memory");
	return a + b + s[0];
}

int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 1;
	char buf[32] = "hello, uprobe";
	long sum = 0;
	for (int i = 0; i < n; i++)
		sum += probed(i, 1000 + i, buf);
	printf("%ld\n", sum);
	return 0;
}
