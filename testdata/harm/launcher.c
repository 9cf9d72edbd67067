// launcher MODE PROG ARGS...: runs PROG the way MODE says — exec (the
// launcher becomes PROG), fork (fork, then exec in the child), vfork
// (vfork, then exec), spawn (posix_spawn) — and exits with PROG's status
// (128+N if a signal N killed it). With GATE=FILE in its environment it
// first waits until FILE exists (time for a daemon to attach to it and
// insert probes whose module is PROG: pending until the exec).
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

int main(int argc, char **argv) {
	if (argc < 3) return 2;
	const char *mode = argv[1];
	char **args = argv + 2;
	const char *gate = getenv("GATE");
	struct stat st;
	printf("pid %d\n", getpid());
	fflush(stdout);
	while (gate && stat(gate, &st) != 0) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	pid_t pid;
	if (!strcmp(mode, "exec")) {
		execv(args[0], args);
		perror("execv");
		return 127;
	} else if (!strcmp(mode, "fork")) {
		pid = fork();
		if (pid == 0) {
			execv(args[0], args);
			_exit(127);
		}
	} else if (!strcmp(mode, "vfork")) {
		pid = vfork();
		if (pid == 0) {
			execv(args[0], args);
			_exit(127);
		}
	} else if (!strcmp(mode, "spawn")) {
		if (posix_spawn(&pid, args[0], NULL, NULL, args, environ) != 0) return 126;
	} else {
		return 2;
	}
	if (pid < 0) return 125;
	int status;
	if (waitpid(pid, &status, 0) < 0) return 124;
	if (WIFEXITED(status)) return WEXITSTATUS(status);
	return 128 + WTERMSIG(status);
}
