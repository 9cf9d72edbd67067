// glibc's __mempcpy_avx_unaligned_erms ends with a jump to
// __memmove_avx_unaligned_erms+3 (past its first instruction, a 3-byte
// mov): a jump pad on __memmove_avx_unaligned_erms covering more than
// that instruction is entered in its middle. Built -static, so that both
// have symbols. Usage: mempcpy N THREADS; prints "bad B calls C".
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *__memmove_avx_unaligned_erms(void *, const void *, size_t);
void *__mempcpy_avx_unaligned_erms(void *, const void *, size_t);

static long n;
static long bad[64], calls[64];

static void *worker(void *arg) {
	long t = (long)arg;
	unsigned char src[512], dst[600];
	for (long i = 0; i < n; i++) {
		size_t len = 1 + (i * 7 + t) % 500;
		for (size_t k = 0; k < len; k++)
			src[k] = (unsigned char)(k * 31 + i + t);
		memset(dst, 0xee, sizeof dst);
		unsigned char *end = __mempcpy_avx_unaligned_erms(dst, src, len);
		if (end != dst + len || memcmp(dst, src, len) != 0 || dst[len] != 0xee)
			bad[t]++;
		calls[t]++;
		void *r = __memmove_avx_unaligned_erms(dst + 1, dst, len);
		if (r != dst + 1 || memcmp(dst + 1, src, len) != 0)
			bad[t]++;
		calls[t]++;
	}
	return NULL;
}

int main(int argc, char **argv) {
	if (!__builtin_cpu_supports("avx2")) {
		printf("no avx2\n");
		return 0;
	}
	n = argc > 1 ? atol(argv[1]) : 1000;
	int threads = argc > 2 ? atoi(argv[2]) : 4;
	pthread_t th[64];
	for (long t = 0; t < threads; t++)
		pthread_create(&th[t], NULL, worker, (void *)t);
	long b = 0, c = 0;
	for (long t = 0; t < threads; t++) {
		pthread_join(th[t], NULL);
		b += bad[t];
		c += calls[t];
	}
	printf("bad %ld calls %ld\n", b, c);
	return b != 0;
}
