/* The tests TEST() registers at load time, and the loop that runs them: shared by the unit test
 * runner and the MPI test runner. */
#include "test_util.h"

#include <string.h>

#define MAX_TESTS 512

static struct {
    const char *name;
    test_fn fn;
} tests[MAX_TESTS];
static int test_count, test_overflow;

void test_register(const char *name, test_fn fn) {
    if (test_count == MAX_TESTS) {
        test_overflow = 1;
        return;
    }
    tests[test_count].name = name;
    tests[test_count].fn = fn;
    test_count++;
}

int test_run_registered(const char *filter, test_runner run, int (*settle)(int failed), int print,
                        int *passed, int *failed) {
    *passed = *failed = 0;
    if (test_overflow) {
        fprintf(stderr, "too many tests: raise MAX_TESTS in test_registry.c\n");
        return -1;
    }
    for (int i = 0; i < test_count; i++) {
        if (filter && !strstr(tests[i].name, filter)) continue;
        int test_failed = 0;
        if (run)
            test_failed = run(tests[i].name, tests[i].fn) != 0;
        else
            tests[i].fn(&test_failed);
        if (settle) test_failed = settle(test_failed);
        if (print) {
            printf("%s %s\n", test_failed ? "FAIL" : "ok  ", tests[i].name);
            fflush(stdout);
        }
        if (test_failed)
            (*failed)++;
        else
            (*passed)++;
    }
    return 0;
}
