// A shared library for the host target's tests (global_linux_test.go):
// glob_fn is the function every process using the library calls. Built
// with -DVARIANT it has other code before it, so that glob_fn is at
// another offset (a rebuilt library).
#ifdef VARIANT
__attribute__((noinline)) long glob_pad(long a) {
	long s = 0;
	for (long i = 0; i < a; i++)
		s += i * 3 + (s >> 2);
	return s;
}
#endif

// glob_name: what a probe reads by its address in the library, which is
// another in each process
const char glob_name[] = "libglob";

__attribute__((noinline)) long glob_fn(long a) {
	__asm__ volatile("" ::: "memory");
	return a * 2 + 1;
}
