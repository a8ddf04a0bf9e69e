/* `fai bench --profile`'s overlap line: how much of the QK and PV work and the softmax work hide
 * each other, from runs with stages left out (fai_run_profiled_without). On the matrix engine QK
 * and PV run on the tile unit and the softmax on the vector unit, the seed's Cube and Vector; on
 * the vector tables all three share the vector unit. */
#ifndef FAI_BENCH_OVERLAP_H
#define FAI_BENCH_OVERLAP_H

#include "fai.h"
#include "fai_json.h"

#include <stdint.h>

/* Medians of the wall time, nothing stored, with: every stage (together); the softmax left out
 * (QK and PV alone); QK and PV left out (the softmax alone); all three left out (neither: the
 * packing, the rescale and the walk over tiles). */
typedef struct ft_bench_overlap {
    double together_ms, qk_pv_alone_ms, softmax_alone_ms, neither_ms;
} ft_bench_overlap;

/* `runs` rounds, each one run of the four kinds in turn (so that the machine's drift falls on
 * them alike). Returns FAI_OK or the failing run's status. */
fai_status ft_bench_overlap_run(const fai_plan *plan, const fai_tensors *tensors, void *workspace,
                                size_t workspace_bytes, int64_t runs, ft_bench_overlap *out);

/* Of the QK and PV time and the softmax time (each over `neither`), what running them together
 * saved: their sum less the time together. Negative when together they cost more. */
double ft_bench_overlap_hidden_ms(const ft_bench_overlap *overlap);

/* As a text line under a table row, or as the member "overlap" of the row's JSON object. */
void ft_bench_overlap_print(const ft_bench_overlap *overlap);
void ft_bench_overlap_json(ft_json *json, const ft_bench_overlap *overlap);

#endif
