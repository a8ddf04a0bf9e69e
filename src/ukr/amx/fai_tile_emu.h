/* The tile vocabulary of fai_mx_body.h emulated in C, following the documented semantics of the
 * AMX instructions, so that the matrix-engine table's logic runs (and is tested) on any CPU:
 * eight thread-local tiles of 16 rows x 64 bytes; TILE_DP is TDPBF16PS: for each row m and column
 * n, over the pairs k in order, c += a[m][2k] * b[k][2n], then c += a[m][2k+1] * b[k][2n+1],
 * each product exact and each sum rounded to nearest even in f32; bf16 inputs that are denormal
 * read as zero and denormal results are flushed to zero. */
#ifndef FAI_TILE_EMU_H
#define FAI_TILE_EMU_H

#include <stdint.h>

void fai__tile_emu_zero(int tile);
void fai__tile_emu_load(int tile, const void *base, int64_t stride);
void fai__tile_emu_store(int tile, void *base, int64_t stride);
void fai__tile_emu_dp(int c, int a, int b);

#define TILE_ZERO(t) fai__tile_emu_zero(t)
#define TILE_LOAD(t, base, stride) fai__tile_emu_load(t, base, stride)
#define TILE_STORE(t, base, stride) fai__tile_emu_store(t, base, stride)
#define TILE_DP(c, a, b) fai__tile_emu_dp(c, a, b)

static inline void tile_enter(void) {}
static inline void tile_leave(void) {}

#endif
