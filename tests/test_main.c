/* Runs every registered test (test_registry.c), each in order, and prints a one-line summary. */
#include "test_util.h"

#include "fai.h"

#include <stdlib.h>

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
    if (test_run_registered(filter, NULL, 1, &passed, &failed)) return 1;
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
