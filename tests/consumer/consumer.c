/* A program built against an installed fai: one attention whose answer is known. Two identical
 * keys get equal weights, so each output row is the mean of the two value rows. */
#include <fai.h>

#include <stdio.h>

int main(void) {
    float q[2 * 4] = {1, 2, 3, 4, -1, 0.5f, 2, 0}; /* [1, 1, 2 heads, 4] */
    float k[2 * 4] = {1, -1, 1, -1, 1, -1, 1, -1}; /* [1, 2 keys, 1 head, 4] */
    float v[2 * 4] = {1, 2, 3, 4, 3, 6, 9, 12};
    float o[2 * 4] = {0};

    fai_problem pb;
    fai_problem_init(&pb);
    pb.batch = 1;
    pb.heads_q = 2;
    pb.heads_kv = 1;
    pb.seq_q = 1;
    pb.seq_kv = 2;
    pb.head_dim = 4;
    pb.k_dtype = pb.v_dtype = FAI_DTYPE_F32;
    pb.threads = 1;

    fai_plan *plan;
    if (fai_plan_create(&pb, &plan) != FAI_OK) {
        fprintf(stderr, "plan: %s\n", fai_last_error());
        return 1;
    }
    static unsigned char ws[1 << 20];
    fai_tensors t = {0};
    t.q = fai_tensor_bshd(q, FAI_DTYPE_F32, 1, 2, 4);
    t.k = fai_tensor_bshd(k, FAI_DTYPE_F32, 2, 1, 4);
    t.v = fai_tensor_bshd(v, FAI_DTYPE_F32, 2, 1, 4);
    t.o = fai_tensor_bshd(o, FAI_DTYPE_F32, 1, 2, 4);
    const size_t ws_size = fai_plan_workspace_size(plan);
    const fai_status st =
        ws_size <= sizeof ws ? fai_run(plan, &t, ws, ws_size) : FAI_ERR_WORKSPACE_TOO_SMALL;
    fai_plan_free(plan);
    if (st != FAI_OK) {
        fprintf(stderr, "run: %s: %s\n", fai_status_string(st), fai_last_error());
        return 1;
    }
    const float want[4] = {2, 4, 6, 8};
    for (int i = 0; i < 8; i++) {
        const float err = o[i] - want[i % 4];
        if (!(err <= 1e-5f && err >= -1e-5f)) { /* NaN fails too */
            fprintf(stderr, "o[%d] = %g, expected %g\n", i, o[i], want[i % 4]);
            return 1;
        }
    }
    printf("fai %d.%d.%d: ok\n", FAI_VERSION_MAJOR, FAI_VERSION_MINOR, FAI_VERSION_PATCH);
    return 0;
}
