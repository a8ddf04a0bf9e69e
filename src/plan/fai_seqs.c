/* Each sequence's lengths, first rows and causal diagonal, resolved once from the problem's
 * length arrays (padded, packed or paged, with or without global positions): what the
 * planner and the kernel read instead of the arrays. */
#include "fai_internal.h"

/* Called on a validated problem: every length is in range. */
fai_status fai__resolve_seqs(const fai_problem *pb, fai_seq *seqs) {
    for (int64_t b = 0; b < pb->batch; b++) {
        fai_seq *seq = &seqs[b];
        if (pb->cu_seqlens_q) {
            seq->q_row0 = pb->cu_seqlens_q[b];
            seq->q_len = pb->cu_seqlens_q[b + 1] - pb->cu_seqlens_q[b];
            /* rows after the last sequence belong to it as padding */
            seq->q_rows = b + 1 == pb->batch ? pb->seq_q - seq->q_row0 : seq->q_len;
        } else {
            seq->q_row0 = 0;
            seq->q_len = pb->seqlens_q ? pb->seqlens_q[b] : pb->seq_q;
            seq->q_rows = pb->seq_q;
        }
        if (pb->cu_seqlens_kv) {
            seq->kv_row0 = pb->cu_seqlens_kv[b];
            seq->kv_len = pb->cu_seqlens_kv[b + 1] - pb->cu_seqlens_kv[b];
        } else {
            seq->kv_row0 = 0;
            seq->kv_len = pb->seqlens_kv ? pb->seqlens_kv[b] : pb->seq_kv;
        }
        /* bottom-right aligns the last query with the last key */
        if (pb->q_positions)
            seq->diagonal = (int64_t)pb->q_positions[b] - pb->kv_positions[b];
        else
            seq->diagonal = pb->causal == FAI_CAUSAL_TOP_LEFT ? 0 : seq->kv_len - seq->q_len;
    }
    return FAI_OK;
}
