/* Status names and the thread-local message of the last failure. */
#include "fai_internal.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[512];

const char *fai_status_string(fai_status status) {
    switch (status) {
#define X(name, value)                                                                             \
    case name:                                                                                     \
        return #name;
        FAI_STATUS_MAP(X)
#undef X
    }
    return "FAI_ERR_UNKNOWN";
}

const char *fai_last_error(void) { return last_error; }

void fai__clear_error(void) { last_error[0] = '\0'; }

fai_status fai__fail(fai_status status, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, args);
    va_end(args);
    return status;
}
