/* Chooses the micro-kernel table once per process: the best this CPU runs, or the one FAI_ISA
 * names (amx, avx512, avx2, neon, ref, amx-emu, amx-emu-avx512; auto or unset: the best), so
 * every table can be tested on one machine. The emulations of the matrix engine (its logic with
 * emulated tiles, and portable or the AMX table's own AVX-512 vector code: for testing) are never
 * chosen unless named. */
#include "arch/fai_cpuid.h"
#include "fai_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct isa_table {
    const char *name;
    int available; /* built in and supported by this CPU */
    fai_cntx cntx;
} isa_table;

/* Best first; the automatic choice stops at ref, which every CPU runs. */
enum { AMX, AVX512, AVX2, NEON, REF, AMX_EMU, AMX_EMU_AVX512 };
static isa_table tables[] = {{"amx", 0, {0}},           {"avx512", 0, {0}}, {"avx2", 0, {0}},
                             {"neon", 0, {0}},          {"ref", 1, {0}},    {"amx-emu", 1, {0}},
                             {"amx-emu-avx512", 0, {0}}};
#define TABLE_COUNT (sizeof tables / sizeof tables[0])
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void init_tables(void) {
    const fai_cpu_features *cpu = fai__cpu_features();
    (void)cpu;
#if defined(FAI_HAVE_AVX512)
    /* (the table is compiled for AVX512BW and VL too, which the compiler may use anywhere) */
    tables[AVX512].available =
        cpu->avx512f && cpu->avx512bw && cpu->avx512vl && cpu->avx2 && cpu->fma && cpu->f16c;
    if (tables[AVX512].available) fai__cntx_init_avx512(&tables[AVX512].cntx);
    /* bf16 dot products only where they run faster than the FMAs they replace */
    if (tables[AVX512].available && cpu->avx512bw && cpu->avx512bf16 && fai__bf16_dot_preferred())
        fai__cntx_add_avx512_bf16(&tables[AVX512].cntx);
    /* what the CPU and the OS offer; the kernel's grant for tile data is asked only when the
     * table is chosen (table_usable), once, before any thread runs a plan made with it: a
     * process that forces another table never asks (a sandbox may forbid the call) */
    const int amx_vector = tables[AVX512].available && cpu->avx512bw && cpu->avx512dq &&
                           cpu->avx512bf16; /* what the AMX table's vector code needs */
    tables[AMX].available = amx_vector && cpu->amx_bf16;
    if (tables[AMX].available) {
        tables[AMX].cntx = tables[AVX512].cntx;
        fai__cntx_add_amx(&tables[AMX].cntx);
        tables[AMX].cntx.name = "amx";
    }
    tables[AMX_EMU_AVX512].available = amx_vector;
    if (amx_vector) {
        tables[AMX_EMU_AVX512].cntx = tables[AVX512].cntx;
        fai__cntx_add_amx_emu_avx512(&tables[AMX_EMU_AVX512].cntx);
        tables[AMX_EMU_AVX512].cntx.name = "amx-emu-avx512";
    }
#endif
#if defined(FAI_HAVE_AVX2)
    tables[AVX2].available = cpu->avx2 && cpu->fma && cpu->f16c;
    if (tables[AVX2].available) fai__cntx_init_avx2(&tables[AVX2].cntx);
#endif
#if defined(FAI_HAVE_NEON)
    tables[NEON].available = cpu->neon;
    if (tables[NEON].available) fai__cntx_init_neon(&tables[NEON].cntx);
#endif
    fai__cntx_init_ref(&tables[REF].cntx);
    fai__cntx_init_ref(&tables[AMX_EMU].cntx);
    fai__cntx_add_amx_emu(&tables[AMX_EMU].cntx);
    tables[AMX_EMU].cntx.name = "amx-emu";
}

/* Whether table i runs here: available, and for the tile unit granted by the kernel (asked
 * here the first time). */
static int table_usable(size_t i) { return tables[i].available && (i != AMX || fai__amx_enable()); }

const fai_cntx *fai__cntx_by_name(const char *name) {
    pthread_once(&tables_once, init_tables);
    for (size_t i = 0; i < TABLE_COUNT; i++)
        if (!strcmp(tables[i].name, name)) return table_usable(i) ? &tables[i].cntx : NULL;
    return NULL;
}

/* The switches read from the environment when the tables are set up (FAI_AMX, FAI_BF16_DOT):
 * each unset, empty, "0" or "1"; anything else is refused rather than read as unset. */
static int switches_valid(void) {
    static const char *const names[] = {"FAI_AMX", "FAI_BF16_DOT"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *value = getenv(names[i]);
        if (value && value[0] && strcmp(value, "0") != 0 && strcmp(value, "1") != 0) {
            fai__fail(FAI_ERR_INVALID_ARG, "%s = '%.64s' is not 0 or 1", names[i], value);
            return 0;
        }
    }
    return 1;
}

fai_status fai__cntx_select(const fai_cntx **out) {
    *out = NULL;
    if (!switches_valid()) return FAI_ERR_INVALID_ARG;
    pthread_once(&tables_once, init_tables);
    const char *forced = getenv("FAI_ISA");
    if (!forced || !*forced || !strcmp(forced, "auto")) {
        for (size_t i = 0; i <= REF; i++)
            if (table_usable(i)) {
                *out = &tables[i].cntx;
                return FAI_OK;
            }
    }
    for (size_t i = 0; i < TABLE_COUNT; i++) {
        if (strcmp(tables[i].name, forced)) continue;
        if (table_usable(i)) {
            *out = &tables[i].cntx;
            return FAI_OK;
        }
        const char *refusal = i == AMX ? fai__amx_refusal() : NULL;
        if (refusal) /* the CPU has the tiles */
            return fai__fail(FAI_ERR_ISA_UNAVAILABLE, "FAI_ISA = %s: %s", forced, refusal);
        return fai__fail(FAI_ERR_ISA_UNAVAILABLE,
                         "FAI_ISA = %s: this build or this CPU cannot run the %s micro-kernels",
                         forced, forced);
    }
    return fai__fail(
        FAI_ERR_ISA_UNAVAILABLE,
        "FAI_ISA = %s is not one of amx, avx512, avx2, neon, ref, amx-emu, amx-emu-avx512, "
        "auto",
        forced);
}
