// app:guarded behind its semaphore (usdtprog.c): fired, and counted, only
// while the semaphore is set.
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

__extension__ unsigned short app_guarded_semaphore __attribute__((unused)) __attribute__((section(".probes")));

__attribute__((noinline)) long guarded(long i) {
	if (__builtin_expect(app_guarded_semaphore, 0)) {
		STAP_PROBE1(app, guarded, i * 3);
		return 1;
	}
	return 0;
}
