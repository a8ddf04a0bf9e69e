/* What the error-path tests share: a problem known to succeed, and checks that fai_plan_create
 * fails with a status and a message naming given strings, or succeeds. */
#ifndef FAI_TEST_ERRORS_H
#define FAI_TEST_ERRORS_H

#include "fai.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* The message holds every given string, in the given order (NULL ends the list). */
static inline int message_has_v(const char *message, va_list args) {
    const char *at = message;
    for (const char *want = va_arg(args, const char *); want; want = va_arg(args, const char *)) {
        const char *found = strstr(at, want);
        if (!found) return 0;
        at = found + strlen(want);
    }
    return 1;
}

static inline void print_wanted(va_list args) {
    for (const char *want = va_arg(args, const char *); want; want = va_arg(args, const char *))
        fprintf(stderr, " \"%s\"", want);
    fprintf(stderr, "\n");
}

/* fai_plan_create must fail with `want`, leave *plan NULL and name the strings in its message. */
static inline int plan_fails(const fai_problem *pb, int want, ...) {
    static int dummy;
    fai_plan *plan = (fai_plan *)&dummy; /* must be overwritten with NULL */
    const fai_status status = fai_plan_create(pb, &plan);
    const char *message = fai_last_error();
    va_list args;
    va_start(args, want);
    const int has = message_has_v(message, args);
    va_end(args);
    const int ok = status == (fai_status)want && plan == NULL && has;
    if (!ok) {
        fprintf(stderr, "  fai_plan_create: %s (want %s), plan %s, message \"%s\", wanted",
                fai_status_string(status), fai_status_string((fai_status)want),
                plan ? "not NULL" : "NULL", message);
        va_start(args, want);
        print_wanted(args);
        va_end(args);
        if (status == FAI_OK && plan != (fai_plan *)&dummy) fai_plan_free(plan);
    }
    return ok;
}

static inline int plan_succeeds(const fai_problem *pb) {
    fai_plan *plan = NULL;
    const fai_status status = fai_plan_create(pb, &plan);
    if (status != FAI_OK) {
        fprintf(stderr, "  fai_plan_create: %s \"%s\"\n", fai_status_string(status),
                fai_last_error());
        return 0;
    }
    const int ok = plan != NULL && fai_last_error()[0] == '\0';
    fai_plan_free(plan);
    return ok;
}

/* A small valid problem: B 2, Hq 4, Hkv 2, Sq 5, Skv 7, D 8, Dv 6, Q f32, K/V f16, O f32. */
static inline void base_problem(fai_problem *pb) {
    fai_problem_init(pb);
    pb->batch = 2;
    pb->heads_q = 4;
    pb->heads_kv = 2;
    pb->seq_q = 5;
    pb->seq_kv = 7;
    pb->head_dim = 8;
    pb->head_dim_v = 6;
    pb->workers = 3;
    pb->threads = 1;
}

#endif
