/* fai run: attention on .npy files.
 *
 * Reads Q, K, V (and the optional mask, lengths and block table), checks every shape against Q's,
 * plans and runs through the public API, and only then writes O (and LSE): each to a temporary
 * file next to its target, both renamed into place at the end. Any failure before that leaves
 * the outputs untouched and prints exactly one line on stderr; the exit status is then 2. */
#include "fai.h"
#include "fai_cmd.h"
#include "fai_run_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERR_LEN 1024

static void print_run_usage(FILE *out) {
    fprintf(out,
            "usage: fai run --q Q.npy --k K.npy --v V.npy --out O.npy [options]\n"
            "\n"
            "Computes O = softmax(scale * Q K^T + mask) V on .npy files (little-endian, C order).\n"
            "\n"
            "inputs:\n"
            "  --q Q.npy              [B, Sq, Hq, D]    float32 or float16\n"
            "  --k K.npy              [B, Skv, Hkv, D]  float32 or float16 (or quantized)\n"
            "  --v V.npy              [B, Skv, Hkv, Dv] float32 or float16 (or quantized)\n"
            "  --bf16                 uint16 arrays of Q, K, V hold bfloat16 bits\n"
            "quantized K and V (each element stands for scale x code):\n"
            "  --k K.npy, --v V.npy   may hold int8 codes, or fp8 codes as uint8 bytes\n"
            "  --k-dtype T            e4m3 or e5m2: the fp8 format of a uint8 K (e4m3 is the\n"
            "                         \"fn\" variant: no infinities, largest 448; e5m2's\n"
            "                         largest is 57344)\n"
            "  --v-dtype T            the same for a uint8 V\n"
            "  --k-scale KS.npy       float32 scales of a quantized K: one per token and kv\n"
            "                         head [B, Skv, Hkv] (paged: [num_pages, page_size, Hkv]),\n"
            "                         one per kv head [Hkv], or one for the tensor [] or [1]\n"
            "  --v-scale VS.npy       the same for a quantized V\n"
            "  --k-channel-scale C.npy  float32 scales of a quantized K per kv head and channel\n"
            "                         [Hkv, D], or [D] for every kv head: K = code x scale x C\n"
            "outputs (written only when the run succeeds):\n"
            "  --out O.npy            [B, Sq, Hq, Dv], float32 unless --out-dtype\n"
            "  --out-dtype T          f32 (default), f16, or bf16 (written as uint16 bits)\n"
            "  --lse LSE.npy          [B, Hq, Sq] float32 log-sum-exp; -inf for empty rows\n"
            "                         (an output replaces a regular file, or the file a link\n"
            "                         leads to, keeping its permissions; it may not name an\n"
            "                         input, a directory, a device or a FIFO)\n"
            "masking:\n"
            "  --causal               bottom-right aligned: query i sees keys j <= i + Skv - Sq\n"
            "  --causal-top-left      top-left aligned: query i sees keys j <= i\n"
            "  --window LEFT,RIGHT    keys within LEFT before and RIGHT after the diagonal;\n"
            "                         -1 leaves a side unbounded; with a causal mask RIGHT is\n"
            "                         0 whatever is given (fai.h)\n"
            "  --mask KEEP.npy        bool/uint8, nonzero = attend      } shaped [Sq, Skv],\n"
            "  --mask-drop DROP.npy   bool/uint8, nonzero = masked out  } [B, Sq, Skv] or\n"
            "  --mask-add ADD.npy     float32 added to the scaled logit } [B, Hq, Sq, Skv]\n"
            "  --mask-bits M.npy      uint8, 1 bit per key (bit j of byte j // 8, least\n"
            "                         significant first), 1 = attend: [Sq, ceil(Skv/8)],\n"
            "                         [B, Sq, ceil(Skv/8)] or [B, Hq, Sq, ceil(Skv/8)]\n"
            "score modifiers:\n"
            "  --softcap C            S <- C tanh(S / C) after the scale, before masks (0: off)\n"
            "  --alibi-slopes S.npy   float32 [Hq]: S -= slope |key pos - query pos| (positions\n"
            "                         as for --causal: query i at i + Skv - Sq)\n"
            "  --sinks S.npy          float32 [Hq]: each row's denominator gains exp(sink);\n"
            "                         the LSE includes it, a row that sees nothing gets the sink\n"
            "  --scale S              logit scale (default 1/sqrt(D)), a float32: 0 weighs\n"
            "                         keys alike; a nonzero S that rounds to 0 is refused\n"
            "lengths and paging:\n"
            "  --seqlens-q SQ.npy     int32 [B]: valid queries per sequence (rows past are 0)\n"
            "  --seqlens-kv SKV.npy   int32 [B]: valid keys per sequence\n"
            "  --block-table BT.npy   int32 [B, max_pages]; K and V are then page pools\n"
            "                         [num_pages, page_size, Hkv, D|Dv]; needs --seqlens-kv\n"
            "precision:\n"
            "  --round-p-bf16         where PV multiplies in bf16 (the matrix engine, or bf16\n"
            "                         dot products with Q, K, V all bf16), P rounded to bf16\n"
            "                         instead of held as hi + lo: faster, O within 2^-8 of\n"
            "                         sum P |V| more (fai.h)\n"
            "execution:\n"
            "  --threads N            threads to run on, at most 1024 (0: the pool's, fewer\n"
            "                         for a small problem)\n"
            "  --workers N            pieces the work is split into, at most 1024 (0: one\n"
            "                         per CPU)\n"
            "  --help                 this text\n"
            "\n"
            "Exit status: 0 on success; 2 on bad input, with one line on stderr and no output\n"
            "file created or changed.\n");
}

/* Plans and runs the loaded problem, then writes the outputs. Returns 0, or 2 after a failure
 * recorded in *a. */
static int run_with(ft_run_args *a, ft_run_inputs *in) {
    ft_run_problem p;
    if (ft_run_load(a, in, &p)) return 2;

    /* -- Step 4: plan -- */
    fai_plan *plan = NULL;
    if (ft_run_plan(a, in, &p, &plan)) return 2;

    /* -- Step 5: run -- */
    const int want_lse = a->value[FT_RUN_OPT_LSE] != NULL;
    const size_t ws_size = fai_plan_workspace_size(plan);
    void *o = NULL;
    float *lse = NULL;
    if (ft_run_alloc_outputs(a, &p, want_lse, &o, &lse)) {
        fai_plan_free(plan);
        return 2;
    }
    void *ws = ft_run_alloc(ws_size);
    if (!ws) {
        free(o);
        free(lse);
        fai_plan_free(plan);
        return ft_run_fail(a, "out of memory (a workspace of %zu bytes)", ws_size);
    }

    fai_tensors t;
    memset(&t, 0, sizeof t);
    t.q = fai_tensor_bshd(in->q.data, p.q_dtype, p.seq_q, p.heads_q, p.head_dim);
    t.k = fai_tensor_bshd(in->k.data, p.k_dtype, p.k_rows, p.heads_kv, p.head_dim);
    t.v = fai_tensor_bshd(in->v.data, p.v_dtype, p.k_rows, p.heads_kv, p.head_dim_v);
    t.o = fai_tensor_bshd(o, a->out_dtype, p.seq_q, p.heads_q, p.head_dim_v);
    if (want_lse) t.lse = ft_run_lse_tensor(lse, p.heads_q, p.seq_q);
    t.mask = p.mask;
    t.alibi_slopes = p.alibi_slopes;
    t.sinks = p.sinks;
    t.k_scale = p.k_scale;
    t.v_scale = p.v_scale;
    t.k_channel_scale = p.k_channel_scale;
    t.block_table = p.paged ? in->block_table.data : NULL;
    t.block_table_stride = 0;

    const fai_status rs = fai_run(plan, &t, ws, ws_size);
    const char *run_why = fai_last_error();
    char run_msg[ERR_LEN];
    snprintf(run_msg, sizeof run_msg, "%s", run_why && *run_why ? run_why : fai_status_string(rs));
    fai_plan_free(plan);
    free(ws);
    int rc = rs != FAI_OK ? ft_run_fail(a, "%s", run_msg) : 0;

    /* -- Step 6: write both outputs to temporary files, then rename both into place -- */
    if (rc == 0) rc = ft_run_write_outputs(a, &p, o, lse);
    free(o);
    free(lse);
    return rc;
}

int ft_cmd_run(int argc, char **argv) {
    ft_run_args a;
    const int prc = ft_run_parse_args(argc, argv, "fai run", 0, &a);
    if (prc < 0) {
        print_run_usage(stdout);
        return 0;
    }
    int rc = prc;
    if (rc == 0) {
        ft_run_inputs in;
        memset(&in, 0, sizeof in);
        rc = run_with(&a, &in);
        ft_run_free_inputs(&in);
    }
    if (rc) fprintf(stderr, "fai run: %s\n", a.error);
    return rc;
}
