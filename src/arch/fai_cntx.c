/* Chooses the micro-kernel table once per process: the best this CPU runs, or the one FAI_ISA
 * names (ref, avx2, avx512, neon), so every table can be tested on one machine. */
#include "arch/fai_cpuid.h"
#include "fai_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static fai_cntx ref_cntx;
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void init_tables(void) {
    fai_cntx_init_ref(&ref_cntx);
}

const fai_cntx *fai__cntx_select(void) {
    pthread_once(&tables_once, init_tables);
    const char *forced = getenv("FAI_ISA");
    if (!forced || !*forced || !strcmp(forced, "ref") || !strcmp(forced, "auto")) return &ref_cntx;
    if (!strcmp(forced, "avx2") || !strcmp(forced, "avx512") || !strcmp(forced, "neon")) {
        fai__fail(FAI_ERR_ISA_UNAVAILABLE, "FAI_ISA = %s: this build has no %s micro-kernels",
                  forced, forced);
        return NULL;
    }
    fai__fail(FAI_ERR_ISA_UNAVAILABLE,
              "FAI_ISA = %s is not one of ref, avx2, avx512, neon, auto", forced);
    return NULL;
}
