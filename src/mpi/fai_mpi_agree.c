/* Agreement of the ranks on the outcome of a step: one MPI_Allreduce (MAX) carries each rank's
 * failure and its signature values (v and -v, so that the maximum gives both extremes), and only
 * when some rank failed does an MPI_Bcast follow with the first failing rank's message. Every
 * rank therefore takes the same branch after it: a failing rank never leaves its peers waiting
 * in a collective it skipped. */
#include "fai_mpi_internal.h"

#include "fai_internal.h"

#include <stdio.h>
#include <string.h>

typedef struct agreed_message {
    int32_t status;
    char text[FAI_MPI_MESSAGE_LEN];
} agreed_message;

void fai_mpi__signature_add(fai_mpi__signature *signature, const char *name, int64_t value) {
    if (signature->count >= FAI_MPI_SIGNATURE_MAX) return;
    signature->name[signature->count] = name;
    /* -INT64_MIN overflows; nothing compared here comes near it */
    signature->value[signature->count] = value == INT64_MIN ? INT64_MIN + 1 : value;
    signature->count++;
}

void fai_mpi__signature_add_absent(fai_mpi__signature *signature, const char *name) {
    const int at = signature->count;
    fai_mpi__signature_add(signature, name, 0);
    if (at < signature->count) signature->absent[at] = 1;
}

void fai_mpi__signature_add_float(fai_mpi__signature *signature, const char *name, float value) {
    int32_t bits;
    memcpy(&bits, &value, sizeof bits);
    const int at = signature->count;
    fai_mpi__signature_add(signature, name, bits);
    if (at < signature->count) signature->is_float[at] = 1;
}

uint64_t fai_mpi__hash_floats(uint64_t hash, const float *values, int64_t count, int64_t stride) {
    for (int64_t i = 0; i < count; i++) {
        uint32_t bits;
        memcpy(&bits, values + i * stride, sizeof bits);
        hash = (hash ^ bits) * UINT64_C(1099511628211);
    }
    return hash;
}

float fai_mpi__scale_of(const fai_problem *pb) {
    if (!pb) return 0.0f;
    int64_t head_dim_v;
    float scale;
    fai__problem_defaults(pb, &head_dim_v, &scale);
    return scale;
}

/* A hash of a per-head modifier array (heads_q floats), absent when the problem has none or the
 * rank passes none (its own checks judge that). */
static void add_head_values(fai_mpi__signature *sig, const char *name, const fai_problem *pb,
                            int wanted, const float *values) {
    if (!pb || !wanted || !values || pb->heads_q < 1 || pb->heads_q > 65536) {
        fai_mpi__signature_add_absent(sig, name);
        return;
    }
    fai_mpi__signature_add(
        sig, name,
        fai_mpi__hash_value(fai_mpi__hash_floats(FAI_MPI_HASH_START, values, pb->heads_q, 1)));
}

void fai_mpi__signature_add_modifiers(fai_mpi__signature *sig, const fai_problem *pb,
                                      const fai_tensors *t) {
    fai_mpi__signature_add_float(sig, "softcap", pb ? pb->softcap : 0.0f);
    fai_mpi__signature_add(sig, "alibi", pb ? pb->alibi : 0);
    fai_mpi__signature_add(sig, "sinks", pb ? pb->sinks : 0);
    add_head_values(sig, "alibi_slopes (their values)", pb, pb && pb->alibi,
                    t ? t->alibi_slopes : NULL);
    add_head_values(sig, "sinks (their values)", pb, pb && pb->sinks, t ? t->sinks : NULL);
}

/* A signature value as the caller gave it. */
static void format_value(const fai_mpi__signature *signature, int i, int64_t value, char *text,
                         size_t size) {
    if (signature->is_float[i]) {
        const int32_t bits = (int32_t)value;
        float f;
        memcpy(&f, &bits, sizeof f);
        snprintf(text, size, "%g", (double)f);
    } else {
        snprintf(text, size, "%lld", (long long)value);
    }
}

/* Broadcasts the message of rank `first` and makes it this rank's error. */
static fai_status adopt_message(MPI_Comm comm, int rank, int first, const fai_mpi__outcome *outcome,
                                double *wait_seconds) {
    agreed_message msg;
    memset(&msg, 0, sizeof msg);
    if (rank == first) {
        msg.status = (int32_t)outcome->status;
        snprintf(msg.text, sizeof msg.text, "%s", outcome->message);
    }
    const double t0 = MPI_Wtime();
    const int rc = MPI_Bcast(&msg, (int)sizeof msg, MPI_BYTE, first, comm);
    *wait_seconds += MPI_Wtime() - t0;
    if (rc != MPI_SUCCESS) return fai_mpi__check_mpi(rc, "MPI_Bcast");
    msg.text[sizeof msg.text - 1] = '\0';
    const fai_status status = msg.status == FAI_OK ? FAI_ERR_INVALID_ARG : (fai_status)msg.status;
    return fai_mpi__fail(status, "rank %d: %s", first, msg.text);
}

fai_status fai_mpi__agree(MPI_Comm comm, const fai_mpi__outcome *outcome,
                          const fai_mpi__signature *signature, double *wait_seconds) {
    int rank = 0, size = 1;
    fai_status status = fai_mpi__check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
    if (status == FAI_OK) status = fai_mpi__check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
    if (status != FAI_OK) return status;

    const int n = signature ? signature->count : 0;
    int64_t buf[1 + 2 * FAI_MPI_SIGNATURE_MAX];
    /* size - rank: the largest belongs to the lowest failing rank */
    buf[0] = outcome->status != FAI_OK ? size - rank : 0;
    /* a value held gives v and -v, both above INT64_MIN (fai_mpi__signature_add), so an absent
     * one's INT64_MIN in both changes neither extreme, and stays only where no rank held one */
    for (int i = 0; i < n; i++) {
        const int held = !signature->absent[i];
        buf[1 + i] = held ? signature->value[i] : INT64_MIN;
        buf[1 + n + i] = held ? -signature->value[i] : INT64_MIN;
    }
    const double t0 = MPI_Wtime();
    const int rc = MPI_Allreduce(MPI_IN_PLACE, buf, 1 + 2 * n, MPI_INT64_T, MPI_MAX, comm);
    *wait_seconds += MPI_Wtime() - t0;
    if (rc != MPI_SUCCESS) return fai_mpi__check_mpi(rc, "MPI_Allreduce");

    if (buf[0] > 0) return adopt_message(comm, rank, size - (int)buf[0], outcome, wait_seconds);
    for (int i = 0; i < n; i++)
        if (buf[1 + i] != INT64_MIN && buf[1 + i] != -buf[1 + n + i]) {
            char low[32], high[32];
            format_value(signature, i, -buf[1 + n + i], low, sizeof low);
            format_value(signature, i, buf[1 + i], high, sizeof high);
            return fai_mpi__fail(FAI_ERR_INVALID_ARG,
                                 "the ranks disagree on %s: from %s on some to %s on others",
                                 signature->name[i], low, high);
        }
    return FAI_OK;
}
