/* fai check: a seeded randomized sweep of the library against the fp64 reference. */
#include "fai_cmd.h"

#include "fai.h"
#include "fai_cases.h"
#include "fai_shape.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_DEFAULT_CASES 1000
#define CHECK_DEFAULT_SEED 1
#define CHECK_MAX_SHOWN 20

static void usage(FILE *out) {
    fprintf(out,
            "usage: fai check [--cases N] [--seed S] [--case SEED] [--verbose] [--help]\n"
            "\n"
            "Runs N random attention problems (shapes, dtypes, GQA, causal, windows, masks,\n"
            "padded / packed / paged lengths, strides, workers, threads, tiles) through the\n"
            "library and compares O and LSE with an fp64 reference.\n"
            "\n"
            "  --cases N     number of cases (default %d)\n"
            "  --seed S      base seed of the sweep (default %d)\n"
            "  --case SEED   run only the case with this seed (as printed for a failure)\n"
            "  --verbose     print every case\n"
            "  --help        this text\n"
            "\n"
            "Exit status: 0 all cases pass, 1 a case failed, 2 usage error.\n",
            CHECK_DEFAULT_CASES, CHECK_DEFAULT_SEED);
}

/* Decimal digits and nothing else (no sign, blanks, or another base). */
static int parse_u64(const char *s, uint64_t *out) {
    if (!s || !(*s >= '0' && *s <= '9')) return 0;
    char *end;
    errno = 0;
    const unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return 0;
    *out = (uint64_t)v;
    return 1;
}

static void print_summary(const fai_case_stats *st) {
    printf("check: %lld cases, %lld passed, %lld failed\n", (long long)st->cases,
           (long long)st->passed, (long long)st->failed);
    printf("largest error per dtype (relative to max(1, |ref|); ratio = error / tolerance):\n");
    printf("  %-28s %6s %6s  %-10s %-10s %-10s %s\n", "dtypes", "cases", "failed", "O error",
           "LSE error", "tolerance", "ratio");
    for (int k = 0; k < FAI_CASE_COMBOS; k++) {
        if (!st->combo_cases[k]) continue;
        char name[64];
        printf("  %-28s %6lld %6lld  %-10.3g %-10.3g %-10.3g %.3g\n",
               fai_case_combo_name(k, name, sizeof name), (long long)st->combo_cases[k],
               (long long)st->combo_failed[k], st->combo_err[k], st->combo_lse[k], st->combo_tol[k],
               st->combo_ratio[k]);
    }
    printf("worst error / tolerance over all cases: %.3g\n", st->max_ratio);
}

/* Builds and checks one case. Verbose: the case is printed before it runs (so a crash names
 * it), and its result after. */
static void run_one(const fai_case_spec *spec, uint64_t case_seed, int verbose,
                    fai_case_result *r) {
    fai_case c;
    if (fai_case_build(&c, spec, case_seed)) {
        memset(r, 0, sizeof *r);
        snprintf(r->desc, sizeof r->desc, "seed=%llu", (unsigned long long)case_seed);
        snprintf(r->why, sizeof r->why, "case build failed: %.400s", c.desc);
        r->max_ratio = INFINITY;
        fai_case_free(&c);
    } else {
        if (verbose) {
            printf("case %s\n", c.desc);
            fflush(stdout);
        }
        fai_case_check(&c, NULL, r);
        fai_case_free(&c);
    }
    if (verbose) {
        printf("  %s: O error %.3g, LSE error %.3g, tolerance %.3g, ratio %.3g\n",
               r->ok ? "pass" : "FAIL", r->max_err, r->max_err_lse, r->tol, r->max_ratio);
        if (!r->ok) printf("  %s\n", r->why);
    }
}

int ft_cmd_check(int argc, char **argv) {
    uint64_t cases = CHECK_DEFAULT_CASES, seed = CHECK_DEFAULT_SEED, one = 0;
    int verbose = 0, only_one = 0, sweep_given = 0;
    if (ft_options_once(argc, argv, "check")) return 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--verbose") || !strcmp(a, "-v")) {
            verbose = 1;
        } else if (!strcmp(a, "--cases") || !strcmp(a, "--seed") || !strcmp(a, "--case")) {
            uint64_t v;
            if (i + 1 >= argc || !parse_u64(argv[i + 1], &v)) {
                fprintf(stderr, "fai check: %s needs a non-negative integer, got '%s'\n", a,
                        i + 1 < argc ? argv[i + 1] : "");
                return 2;
            }
            i++;
            if (!strcmp(a, "--cases"))
                cases = v, sweep_given = 1;
            else if (!strcmp(a, "--seed"))
                seed = v, sweep_given = 1;
            else {
                one = v;
                only_one = 1;
            }
        } else {
            fprintf(stderr, "fai check: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (only_one && sweep_given) {
        fprintf(stderr, "fai check: --case runs one case: --cases and --seed do not apply\n");
        return 2;
    }
    if (cases > 100000000) {
        fprintf(stderr, "fai check: --cases %llu is too many\n", (unsigned long long)cases);
        return 2;
    }

    fai_case_spec spec;
    fai_case_spec_any(&spec);
    fai_case_stats st;
    fai_case_stats_init(&st);
    if (only_one) {
        fai_case_result r;
        run_one(&spec, one, 1, &r);
        return r.ok ? 0 : 1;
    }

    printf("check: %llu cases from seed %llu\n", (unsigned long long)cases,
           (unsigned long long)seed);
    fflush(stdout);
    uint64_t next_report = 1, shown = 0;
    for (uint64_t i = 0; i < cases; i++) {
        fai_case_result r;
        run_one(&spec, fai_case_seed(seed, i), verbose, &r);
        fai_case_stats_add(&st, &r);
        if (!r.ok && (verbose || shown < CHECK_MAX_SHOWN)) {
            if (!verbose) printf("FAIL %s\n  %s\n", r.desc, r.why);
            shown++;
            if (!verbose && shown == CHECK_MAX_SHOWN)
                printf("  (further failures are counted, not shown)\n");
        }
        /* progress: a line every 10 % */
        const uint64_t done = i + 1;
        if (!verbose && done * 10 >= next_report * cases) {
            while (done * 10 >= next_report * cases && next_report <= 10)
                next_report++;
            printf("check: %llu/%llu cases (%llu %%), %lld failed\n", (unsigned long long)done,
                   (unsigned long long)cases, (unsigned long long)(done * 100 / cases),
                   (long long)st.failed);
        }
        fflush(stdout);
    }
    print_summary(&st);
    if (st.failed)
        printf("reproduce a failure with: fai check --case SEED (the seed= of its line)\n");
    return st.failed ? 1 : 0;
}
