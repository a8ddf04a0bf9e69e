/* Minimal test harness: TEST(name) registers a test at load time; the runner in test_main.c runs
 * them all (or those whose name contains argv[1]) and ends with "N passed, N failed". */
#ifndef FAI_TEST_UTIL_H
#define FAI_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>

typedef void (*test_fn)(int *failed);
void test_register(const char *name, test_fn fn);

/* Runs one test and returns nonzero when it failed. */
typedef int (*test_runner)(const char *name, test_fn fn);

/* Runs the registered tests whose name contains filter (all when NULL), in order: each through
 * run when given (test_main.c runs each in a child process), else in this process. Each test's
 * failure goes through settle when given (several processes agree on it there); with print, one
 * line per test. Counts into *passed and *failed; -1 (and no test run) when more tests were
 * registered than the registry holds. */
int test_run_registered(const char *filter, test_runner run, int (*settle)(int failed), int print,
                        int *passed, int *failed);

#define TEST(name)                                                                                 \
    static void test_##name(int *test_failed_);                                                    \
    __attribute__((constructor)) static void test_register_##name(void) {                          \
        test_register(#name, test_##name);                                                         \
    }                                                                                              \
    static void test_##name(int *test_failed_)

/* Non-fatal check: records the failure with its location and continues. */
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);             \
            *test_failed_ = 1;                                                                     \
        }                                                                                          \
    } while (0)

/* Fatal check: records the failure and leaves the test. */
#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "  %s:%d: REQUIRE(%s) failed\n", __FILE__, __LINE__, #cond);           \
            *test_failed_ = 1;                                                                     \
            return;                                                                                \
        }                                                                                          \
    } while (0)

#define TEST_FAILED (*test_failed_)

/* A count or seed from the environment (decimal, or 0x hex), or fallback when unset, empty or
 * not a number: how a long test's size is chosen per run. */
static inline long test_env_long(const char *name, long fallback) {
    const char *s = getenv(name);
    if (!s || !*s) return fallback;
    char *end;
    const long v = strtol(s, &end, 0);
    return *end ? fallback : v;
}

#endif
