/* The message of the last failing fai_mpi call, and a rank's outcome before the ranks agree. */
#include "fai_mpi_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[FAI_MPI_MESSAGE_LEN + 32];

const char *fai_mpi_last_error(void) { return last_error; }

void fai_mpi__clear_error(void) { last_error[0] = '\0'; }

fai_status fai_mpi__fail(fai_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

fai_status fai_mpi__check_mpi(int rc, const char *call) {
    if (rc == MPI_SUCCESS) return FAI_OK;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
        snprintf(text, sizeof text, "error %d", rc);
    return fai_mpi__fail(FAI_ERR_UNSUPPORTED, "%s: %s", call, text);
}

fai_status fai_mpi__comm_rank_size(MPI_Comm comm, int *rank, int *size) {
    if (comm == MPI_COMM_NULL) return fai_mpi__fail(FAI_ERR_INVALID_ARG, "comm = MPI_COMM_NULL");
    fai_status status = fai_mpi__check_mpi(MPI_Comm_rank(comm, rank), "MPI_Comm_rank");
    if (status == FAI_OK) status = fai_mpi__check_mpi(MPI_Comm_size(comm, size), "MPI_Comm_size");
    return status;
}

void fai_mpi__outcome_init(fai_mpi__outcome *outcome) {
    outcome->status = FAI_OK;
    outcome->message[0] = '\0';
}

void fai_mpi__outcome_fail(fai_mpi__outcome *outcome, fai_status status, const char *fmt, ...) {
    if (outcome->status != FAI_OK) return;
    outcome->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(outcome->message, sizeof outcome->message, fmt, ap);
    va_end(ap);
}

void fai_mpi__outcome_fai(fai_mpi__outcome *outcome, fai_status status) {
    if (status == FAI_OK) return;
    const char *why = fai_last_error();
    fai_mpi__outcome_fail(outcome, status, "%s", why && *why ? why : fai_status_string(status));
}
