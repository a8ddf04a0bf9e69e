/* The AMX table with its tiles emulated and its vector work the AMX table's own AVX-512 code
 * (FAI_ISA=amx-emu-avx512): on an AVX-512 CPU without AMX (AMD Zen 4 and 5, most Xeons before
 * Sapphire Rapids) it runs every instruction of the AMX table but the tile ones, so its vector
 * half is tested there too; the portable vector code of amx-emu must give the same bits. Compiled
 * with the AVX-512 flags of the AMX table, without its AMX ones. */
#include "ukr/amx/fai_tile_emu.h"
#include "ukr/amx/fai_mxv_avx512.h"
#include "ukr/amx/fai_mx_body.h"

void fai__cntx_add_amx_emu_avx512(fai_cntx *cntx) { add_mx_entries(cntx); }
