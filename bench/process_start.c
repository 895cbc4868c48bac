/* What starting a command costs on this machine, the floor under every build tool's per-command time: N times
 * `posix_spawn` of /bin/true and wait for it (what ninja does per command, and the spawner's supervisor does
 * for ours), then N times `fork` of this small process, exit in the child and wait (what a supervisor per
 * command adds). Prints microseconds per start for each.
 *
 *   cc -O2 -o process_start bench/process_start.c && ./process_start 3000
 */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 3000;
    if (n <= 0 || n > 1000000) {
        fprintf(stderr, "usage: %s [N, 1..1000000]\n", argv[0]);
        return 2;
    }
    char *args[] = {"/bin/true", NULL};
    double t0 = now();
    for (int i = 0; i < n; i++) {
        pid_t pid;
        int status;
        if (posix_spawn(&pid, args[0], NULL, NULL, args, environ) != 0 || waitpid(pid, &status, 0) != pid) {
            perror("posix_spawn");
            return 1;
        }
    }
    double spawn = (now() - t0) / n * 1e6;
    t0 = now();
    for (int i = 0; i < n; i++) {
        int status;
        pid_t pid = fork();
        if (pid == 0)
            _exit(0);
        if (pid < 0 || waitpid(pid, &status, 0) != pid) {
            perror("fork");
            return 1;
        }
    }
    double fork_exit = (now() - t0) / n * 1e6;
    printf("posix_spawn /bin/true + wait: %.1f us; fork + exit + wait: %.1f us (%d each)\n", spawn, fork_exit, n);
    return 0;
}
