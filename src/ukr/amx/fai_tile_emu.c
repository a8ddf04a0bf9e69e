/* The emulated tiles of fai_tile_emu.h. */
#include "ukr/amx/fai_tile_emu.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define ROWS 16
#define ROW_BYTES 64

static _Thread_local unsigned char tiles[8][ROWS][ROW_BYTES];

void fai__tile_emu_zero(int tile) { memset(tiles[tile], 0, sizeof tiles[tile]); }

void fai__tile_emu_load(int tile, const void *base, int64_t stride) {
    for (int r = 0; r < ROWS; r++)
        memcpy(tiles[tile][r], (const unsigned char *)base + r * stride, ROW_BYTES);
}

void fai__tile_emu_store(int tile, void *base, int64_t stride) {
    for (int r = 0; r < ROWS; r++)
        memcpy((unsigned char *)base + r * stride, tiles[tile][r], ROW_BYTES);
}

/* bf16 element e of a tile row as f32, denormals read as zero */
static float bf16_at(const unsigned char *row, int e) {
    uint16_t bits;
    memcpy(&bits, row + 2 * e, sizeof bits);
    if ((bits & 0x7f80) == 0) bits &= 0x8000;
    const uint32_t wide = (uint32_t)bits << 16;
    float value;
    memcpy(&value, &wide, sizeof value);
    return value;
}

static float flush_denormal(float x) { return fabsf(x) < FLT_MIN ? copysignf(0.0f, x) : x; }

void fai__tile_emu_dp(int c, int a, int b) {
    float a_values[ROWS][32], b_values[ROWS][32];
    for (int r = 0; r < ROWS; r++)
        for (int e = 0; e < 32; e++) {
            a_values[r][e] = bf16_at(tiles[a][r], e);
            b_values[r][e] = bf16_at(tiles[b][r], e);
        }
    for (int m = 0; m < ROWS; m++) {
        float acc[16];
        memcpy(acc, tiles[c][m], sizeof acc);
        /* each product is exact in f32 (8-bit significands); each sum rounds, as written
         * (built with -ffp-contract=off) */
        for (int k = 0; k < 16; k++)
            for (int n = 0; n < 16; n++) {
                acc[n] = flush_denormal(acc[n] + a_values[m][2 * k] * b_values[k][2 * n]);
                acc[n] = flush_denormal(acc[n] + a_values[m][2 * k + 1] * b_values[k][2 * n + 1]);
            }
        memcpy(tiles[c][m], acc, sizeof acc);
    }
}
