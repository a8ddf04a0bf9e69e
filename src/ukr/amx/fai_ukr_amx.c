/* The matrix-engine entries on Intel AMX (AMX-TILE, AMX-BF16) with AVX-512 for the vector work.
 * Compiled with the AMX and AVX-512 flags only here; the dispatcher adds these entries only on a
 * CPU that has AMX and a kernel that granted this process its tile state. */
#include "ukr/amx/fai_tile_amx.h"
#include "ukr/amx/fai_mxv_avx512.h"
#include "ukr/amx/fai_mx_body.h"

void fai__cntx_add_amx(fai_cntx *cntx) { add_mx_entries(cntx); }
