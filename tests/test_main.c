/* Runs every registered test (test_registry.c), each in a child process of its own, and prints a
 * one-line summary. A test that crashes or runs past FAI_TEST_TIMEOUT seconds (default 600) is
 * that test's failure, and the runner goes on with the next. FAI_TEST_FORK=0 runs the tests in
 * this process instead (for a debugger). */
#include "test_util.h"

#include "fai.h"
#include "ukr/fai_ukr.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_TIMEOUT_SECONDS 600

static double timeout_seconds = DEFAULT_TIMEOUT_SECONDS;

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void pause_for(long nanoseconds) {
    struct timespec ts = {0, nanoseconds};
    while (nanosleep(&ts, &ts) && errno == EINTR) {
    }
}

/* Waits for the child until the deadline, polling ever more slowly (up to every 10 ms): 1 when
 * it ended (its status in *status), 0 when the deadline passed, -1 on a failed wait. */
static int wait_until(pid_t pid, double deadline, int *status) {
    long pause = 100000;
    for (;;) {
        const pid_t done = waitpid(pid, status, WNOHANG);
        if (done == pid) return 1;
        if (done < 0 && errno != EINTR) return -1;
        if (now_seconds() > deadline) return 0;
        pause_for(pause);
        if (pause < 10000000) pause *= 2;
    }
}

/* The test in a child process: it exits with its verdict (exit, not _exit, so that sanitizers'
 * leak checks and coverage counters run for it). */
static int run_in_child(const char *name, test_fn fn) {
    fflush(stdout);
    fflush(stderr);
    const pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "  %s: fork failed: %s\n", name, strerror(errno));
        return 1;
    }
    if (pid == 0) {
        int failed = 0;
        fn(&failed);
        fflush(stdout);
        fflush(stderr);
        exit(failed ? 1 : 0);
    }
    int status = 0;
    const int ended = wait_until(pid, now_seconds() + timeout_seconds, &status);
    if (ended <= 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        if (ended == 0)
            fprintf(stderr, "  %s: still running after %g s (FAI_TEST_TIMEOUT), killed\n", name,
                    timeout_seconds);
        else
            fprintf(stderr, "  %s: waiting for its process failed: %s\n", name, strerror(errno));
        return 1;
    }
    if (WIFSIGNALED(status)) {
        fprintf(stderr, "  %s: killed by signal %d (%s)\n", name, WTERMSIG(status),
                strsignal(WTERMSIG(status)));
        return 1;
    }
    if (!WIFEXITED(status)) return 1;
    if (WEXITSTATUS(status) > 1)
        fprintf(stderr, "  %s: its process exited with status %d\n", name, WEXITSTATUS(status));
    return WEXITSTATUS(status) != 0;
}

int main(int argc, char **argv) {
    const char *filter = argc > 1 ? argv[1] : NULL;
    int passed = 0, failed = 0;
    /* the planner's own tiles, whatever `fai tune` stored on this machine (test_tuning.c
     * points the cache at its own file) */
    setenv("FAI_TUNE_CACHE", "off", 1);
    const char *timeout = getenv("FAI_TEST_TIMEOUT");
    if (timeout && *timeout) {
        char *end;
        const double seconds = strtod(timeout, &end);
        if (*end || !(seconds > 0)) {
            fprintf(stderr, "FAI_TEST_TIMEOUT needs a number of seconds > 0, got '%s'\n", timeout);
            return 2;
        }
        timeout_seconds = seconds;
    }
    const char *fork_tests = getenv("FAI_TEST_FORK");
    const test_runner run = fork_tests && !strcmp(fork_tests, "0") ? NULL : run_in_child;
    /* FAI_ISA may force a micro-kernel table this machine cannot run: skip, do not fail */
    fai_problem probe;
    fai_problem_init(&probe);
    probe.heads_q = probe.heads_kv = probe.head_dim = 1;
    fai_plan *plan = NULL;
    if (fai_plan_create(&probe, &plan) == FAI_ERR_ISA_UNAVAILABLE) {
        printf("skipped: %s\n", fai_last_error());
        return 77;
    }
    fai_plan_free(plan);
    /* FAI_BF16_DOT=1 asks for bf16 dot products, which the table may not have */
    const char *bf16_dot = getenv("FAI_BF16_DOT");
    const fai_cntx *table;
    if (fai__cntx_select(&table) != FAI_OK) {
        printf("%s\n", fai_last_error());
        return 1;
    }
    if (bf16_dot && !strcmp(bf16_dot, "1") && !table->qk_bf16) {
        printf("skipped: FAI_BF16_DOT=1, and the %s table has no bf16 dot products\n", table->name);
        return 77;
    }
    if (test_run_registered(filter, run, NULL, 1, &passed, &failed)) return 1;
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
