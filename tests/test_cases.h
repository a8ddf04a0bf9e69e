/* Checks of fai_cases' generated cases for the test files: each says why a case failed (its
 * description and first failure, on stderr), so a failing test shows which case and what. */
#ifndef FAI_TEST_CASES_H
#define FAI_TEST_CASES_H

#include "fai_cases.h"

#include <stdint.h>
#include <stdio.h>

/* fai_case_check of c on the default pool, saying why when it fails; returns whether it passed. */
static inline int case_check_says_why(fai_case *c) {
    fai_case_result r;
    if (!fai_case_check(c, NULL, &r)) fprintf(stderr, "  %s\n  %s\n", r.desc, r.why);
    return r.ok;
}

/* fai_case_run of spec with seed, saying why when it fails; returns whether it passed. */
static inline int case_run_says_why(const fai_case_spec *spec, uint64_t seed) {
    fai_case_result r;
    if (!fai_case_run(spec, seed, &r)) fprintf(stderr, "  %s\n  %s\n", r.desc, r.why);
    return r.ok;
}

#endif
