/* Runs every registered test, each in order, and prints a one-line summary. */
#include "test_util.h"

#include "fai.h"

#include <stdlib.h>
#include <string.h>

#define MAX_TESTS 512

static struct {
    const char *name;
    test_fn fn;
} tests[MAX_TESTS];
static int test_count;

void test_register(const char *name, test_fn fn) {
    if (test_count < MAX_TESTS) {
        tests[test_count].name = name;
        tests[test_count].fn = fn;
        test_count++;
    }
}

int main(int argc, char **argv) {
    const char *filter = argc > 1 ? argv[1] : NULL;
    int passed = 0, failed = 0;
    /* the planner's own tiles, whatever `fai tune` stored on this machine (test_tuning.c
     * points the cache at its own file) */
    setenv("FAI_TUNE_CACHE", "off", 1);
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
    if (test_count >= MAX_TESTS) {
        fprintf(stderr, "too many tests: raise MAX_TESTS\n");
        return 1;
    }
    for (int i = 0; i < test_count; i++) {
        if (filter && !strstr(tests[i].name, filter)) continue;
        int test_failed = 0;
        tests[i].fn(&test_failed);
        printf("%s %s\n", test_failed ? "FAIL" : "ok  ", tests[i].name);
        fflush(stdout);
        if (test_failed)
            failed++;
        else
            passed++;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
