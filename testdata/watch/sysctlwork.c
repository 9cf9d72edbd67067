/*
 * sysctlwork: a guest workload of the watch-probe lab tests
 * (gdbtarget/watch_lab_test.go, xen/watch_lab_test.go), built with
 * `gcc -static -O2`. It writes a sysctl file W times and reads it R times,
 * each with one system call at offset 0 (pwrite, pread), so the kernel
 * variable behind the file is written exactly W times and read exactly R
 * times by the sysctl handler (proc_dointvec: one store per write of one
 * value, one load per read from offset 0), and by nothing else of this
 * program's:
 *
 *   sysctlwork PATH W R VALUE
 *
 * prints "SYSCTLWORK pid P writes W reads R" and checks every result (each
 * write takes the whole value, each read returns VALUE); on a mismatch it
 * prints "SYSCTLWORK error ..." and exits 1.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: sysctlwork PATH W R VALUE\n");
		return 2;
	}
	long w = atol(argv[2]), r = atol(argv[3]);
	char val[32], buf[64];
	int n = snprintf(val, sizeof val, "%s\n", argv[4]);
	int fd = open(argv[1], O_RDWR);
	if (fd < 0) {
		printf("SYSCTLWORK error open %s\n", argv[1]);
		return 1;
	}
	for (long i = 0; i < w; i++) {
		if (pwrite(fd, val, n, 0) != n) {
			printf("SYSCTLWORK error write %ld\n", i);
			return 1;
		}
	}
	for (long i = 0; i < r; i++) {
		ssize_t got = pread(fd, buf, sizeof buf - 1, 0);
		if (got != n || memcmp(buf, val, n) != 0) {
			printf("SYSCTLWORK error read %ld: %zd bytes\n", i, got);
			return 1;
		}
	}
	printf("SYSCTLWORK pid %d writes %ld reads %ld\n", (int)getpid(), w, r);
	return 0;
}
