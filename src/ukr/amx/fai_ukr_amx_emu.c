/* The matrix-engine entries with emulated tiles and portable vector code: the AMX table's logic
 * on any CPU (FAI_ISA=amx-emu), so that every machine tests it. Slow by design. */
#include "ukr/amx/fai_tile_emu.h"
#include "ukr/amx/fai_mxv_portable.h"
#include "ukr/amx/fai_mx_body.h"

void fai__cntx_add_amx_emu(fai_cntx *cntx) { add_mx_entries(cntx); }
