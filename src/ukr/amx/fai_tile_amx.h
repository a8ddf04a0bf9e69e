/* The tile vocabulary of fai_mx_body.h on Intel AMX: eight tile registers, each configured as
 * 16 rows of 64 bytes, loaded and stored with a row stride in bytes. TDPBF16PS multiplies a
 * 16 x 32 bf16 tile by a 32 x 16 bf16 tile held in pairs (row k holds elements 2k and 2k + 1 of
 * every column) into a 16 x 16 f32 tile. Tile numbers must be constants. */
#ifndef FAI_TILE_AMX_H
#define FAI_TILE_AMX_H

#include <immintrin.h>
#include <stdint.h>

#define TILE_ZERO(t) _tile_zero(t)
#define TILE_LOAD(t, base, stride) _tile_loadd(t, base, stride)
#define TILE_STORE(t, base, stride) _tile_stored(t, base, stride)
#define TILE_DP(c, a, b) _tile_dpbf16ps(c, a, b)

/* The 64-byte configuration LDTILECFG reads: palette 1, every tile 16 rows of 64 bytes (bytes
 * 16-31 the rows' byte widths, 48-63 the row counts). In static memory: gcc 12's
 * _tile_loadconfig tells the compiler it reads only 8 bytes, so a configuration built on the
 * stack may lose its stores. */
static const unsigned char tile_config[64] __attribute__((aligned(64))) = {
    [0] = 1,   [16] = 64, [18] = 64, [20] = 64, [22] = 64, [24] = 64,
    [26] = 64, [28] = 64, [30] = 64, [48] = 16, [49] = 16, [50] = 16,
    [51] = 16, [52] = 16, [53] = 16, [54] = 16, [55] = 16};

static inline void tile_enter(void) { _tile_loadconfig(tile_config); }

/* Returns the tile state to its initial state, so the OS need not save it on a switch. */
static inline void tile_leave(void) { _tile_release(); }

#endif
