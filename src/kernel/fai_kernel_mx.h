/* The kernel driver's matrix-engine path (included by fai_kernel_body.h): a unit's kv tiles on the
 * tile unit (QK, PV) and the vector unit (masks, softmax, rescale), pipelined as the seed's
 * Cube and Vector cores are. The unit's rows are cut into blocks of FAI_MX_BLOCK_ROWS. With two
 * kv tiles in flight (plan->mx_pipeline, the seed's KERNEL_TASK_NUM), for kv tile t and each
 * block b, in program order:
 *
 *     softmax(t, b)  rescale O(b)  PV(t, b)  QK(t + 1, b)
 *
 * Tile instructions run asynchronously to the vector instructions that follow them, so the PV
 * of block b and the QK of the next tile for block b proceed on the tile unit while the vector
 * unit runs the softmax of block b + 1 (the seed's C2 -> V1 and C1 -> V1 overlap); S of block b
 * is free for the next tile's QK as soon as its softmax has read it, so one S buffer serves
 * both tiles. K and V of tile t + 1 are packed (or found in the cache) before tile t's blocks
 * start, into the second of two buffers. With one tile in flight, each block runs QK(t, b)
 * just before its softmax, and one K/V buffer serves: where a row block's operands fit L1d, the
 * next tile's K and V beside them pushed them out. */

/* One kv tile's operands. */
typedef struct mx_tile {
    tile_extent extent;
    int64_t n_pad;
    const uint16_t *k, *v;
    int state; /* as the cache's */
} mx_tile;

/* Whether Q or K is held in more than one part: then an Inf meeting a part of 0 in a tile
 * product could give NaN where the exact score is +-Inf (see mx_qk_exact). */
static int mx_qk_has_parts(const fai_plan *plan) {
    return plan->mx_q_parts > 1 || plan->mx_k_parts > 1;
}

static uint16_t *mx_q_block(const fai_plan *plan, const unit_scratch *sc, int64_t block) {
    return (uint16_t *)sc->q_tile + block * plan->mx_q_parts * FAI_MX_BLOCK_ROWS * plan->d_pad;
}

static uint16_t *mx_p_block(const fai_plan *plan, const unit_scratch *sc, int64_t block) {
    return (uint16_t *)(sc->s_tile + plan->ld_s * plan->ld_n) +
           block * 2 * FAI_MX_BLOCK_ROWS * plan->ld_n;
}

/* Step 1 on the matrix engine: the unit's Q rows, block by block, into bf16 parts. */
static void mx_pack_q_blocks(const fai_plan *plan, const unit_scratch *sc, int64_t rows,
                             fai_dtype dtype) {
    int in_range = 1;
    for (int64_t r0 = 0; r0 < rows; r0 += FAI_MX_BLOCK_ROWS) {
        const int64_t m = rows - r0 < FAI_MX_BLOCK_ROWS ? rows - r0 : FAI_MX_BLOCK_ROWS;
        in_range &= plan->cntx->mx_pack_q(mx_q_block(plan, sc, r0 / FAI_MX_BLOCK_ROWS),
                                          plan->mx_q_parts, sc->row_ptrs + r0, m, FAI_MX_BLOCK_ROWS,
                                          plan->pb.head_dim, plan->d_pad, dtype);
    }
    *sc->q_dot_ok = in_range;
    memset(sc->mx_row_sums, 0, (size_t)(plan->ld_s * FAI_MX_SUM_LANES) * sizeof(float));
}

/* K and V of one kv tile (an offset into the unit's range), packed into the cache or into the
 * slot's buffer `buffer` (0 or 1). */
static mx_tile mx_prepare(const fai_plan *plan, const fai_tensors *t, const fai_unit *unit,
                          int64_t tile, int buffer, const unit_scratch *sc) {
    const fai_cntx *cntx = plan->cntx;
    const int64_t b = unit->batch;
    const int64_t d = plan->pb.head_dim, dv = plan->head_dim_v, d_pad = plan->d_pad;
    mx_tile mt;
    mt.extent = tile_extent_of(plan, unit, tile);
    const int64_t key_begin = mt.extent.key_begin, n = mt.extent.n;
    mt.n_pad = fai__ceil_div(n, 32) * 32;

    const int64_t k_elems = plan->ld_n * d_pad * plan->mx_k_parts;
    const int64_t v_elems = plan->ld_n * plan->ld_o * plan->mx_v_parts;
    uint16_t *k = (uint16_t *)sc->k_tile + buffer * k_elems;
    uint16_t *v = (uint16_t *)sc->v_tile + buffer * v_elems;
    unsigned char *cached = NULL;
    unsigned char *state = kv_cache_find(plan, sc, unit, key_begin, &cached);
    if (state) {
        k = (uint16_t *)cached;
        v = (uint16_t *)(cached + plan->ws.kv_cache_k_bytes);
    }
    mt.k = k;
    mt.v = v;
    if (state && *state) {
        mt.state = *state;
        return mt;
    }
    /* K is checked where Inf or NaN could meet a part of 0 (see mx_qk_exact); V always, as a
     * tile product would turn an Inf P carries into NaN (see mx_pv_sparse) */
    fai__kv_rows(&sc->rows->k, b, unit->head_kv, key_begin, n, sc->row_ptrs);
    const int k_finite = cntx->mx_pack_k(k, plan->mx_k_parts, sc->row_ptrs, n, mt.n_pad, d, d_pad,
                                         t->k.dtype, mx_qk_has_parts(plan) || state);
    fai__kv_rows(&sc->rows->v, b, unit->head_kv, key_begin, n, sc->row_ptrs);
    const int v_finite =
        cntx->mx_pack_v(v, plan->mx_v_parts, sc->row_ptrs, n, mt.n_pad, dv, plan->ld_o, t->v.dtype);
    mt.state = KV_PACKED | (k_finite ? 0 : KV_K_NONFINITE) | (v_finite ? 0 : KV_V_EXACT);
    if (state) *state = (unsigned char)mt.state;
    return mt;
}

/* The keys of a kv tile that the rows [r0, r0 + m) of the unit compute (band_seen_keys), in
 * the multiples of 32 the tile products take: a block of 8 query positions sees less of the
 * diagonal's tile (or of a window's first) than the whole unit does. */
static key_range mx_block_keys(const fai_unit *unit, const mx_tile *mt, int64_t r0, int64_t m) {
    return band_seen_keys(&mt->extent, unit->q_begin + r0 / unit->heads,
                          unit->q_begin + (r0 + m - 1) / unit->heads, 32, mt->n_pad);
}

/* QK of one row block: S rows of the block = Q K^T, unscaled. */
static void mx_qk_block(const fai_plan *plan, const fai_tensors *t, const fai_unit *unit,
                        const unit_scratch *sc, const mx_tile *mt, int64_t block, int64_t rows) {
    const fai_cntx *cntx = plan->cntx;
    const int64_t r0 = block * FAI_MX_BLOCK_ROWS, ld_n = plan->ld_n;
    const int64_t m = rows - r0 < FAI_MX_BLOCK_ROWS ? rows - r0 : FAI_MX_BLOCK_ROWS;
    const uint16_t *q = mx_q_block(plan, sc, block);
    float *s = sc->s_tile + r0 * ld_n;
    if (plan->pb.mask_kind == FAI_MASK_KEEP_BITS &&
        bits_rows_empty(t, unit, mt->extent.key_begin, mt->extent.n, r0, r0 + m))
        return; /* its softmax and PV are skipped too */
    if (!FAI_KEEPS(FAI_STAGE_QK)) {
        memset(s, 0, (size_t)(FAI_MX_BLOCK_ROWS * ld_n) * sizeof(float));
        return;
    }
    /* exact where the tile products could lose a product: Q out of their range (which takes
     * Inf and NaN in), or Inf and NaN in K meeting a part of 0 */
    if (!*sc->q_dot_ok || (mx_qk_has_parts(plan) && (mt->state & KV_K_NONFINITE)))
        cntx->mx_qk_exact(s, ld_n, q, plan->mx_q_parts, mt->k, plan->mx_k_parts, m, mt->extent.n,
                          FAI_MX_BLOCK_ROWS, mt->n_pad, plan->pb.head_dim, plan->d_pad);
    else {
        const key_range keys = mx_block_keys(unit, mt, r0, m);
        cntx->mx_qk(s, ld_n, q, plan->mx_q_parts, mt->k, plan->mx_k_parts, FAI_MX_BLOCK_ROWS,
                    mt->n_pad, keys.begin, keys.end, plan->d_pad);
    }
}

/* The vector stages of one row block over the tile's keys `keys` (mx_block_keys): the scale
 * where it is not folded into the exponent, the score modifiers, the masks, the online softmax
 * into P (in p_parts) and O rescaled. */
static void mx_vector_stages(const fai_plan *plan, const fai_tensors *t, const fai_unit *unit,
                             const unit_scratch *sc, const mx_tile *mt, int64_t r0, int64_t m,
                             key_range keys, uint16_t *p, int p_parts) {
    const fai_cntx *cntx = plan->cntx;
    const int64_t ld_n = plan->ld_n;
    const tile_extent *e = &mt->extent;
    const int64_t n = e->n < keys.end ? e->n : keys.end; /* the keys the block computes */
    const int masked = e->band_partial || plan->pb.mask_kind != FAI_MASK_NONE;
    float *s = sc->s_tile + r0 * ld_n;
    /* the passes before the softmax start at the block's first key: s_keys, n_keys */
    float *s_keys = s + keys.begin;
    const int64_t n_keys = n - keys.begin, first_key = e->key_begin + keys.begin;
    /* the scale is folded into the softmax's exponent where that is exact: a positive, not huge
     * scale and masks that only remove keys; else S is scaled first, as the other tables do
     * (with the score modifiers, in their pass) */
    float scale = plan->scale;
    if (plan->k_scaled) cntx->scale_keys_rows(s_keys, ld_n, m, n_keys, sc->k_scales + keys.begin);
    if (plan->mods) {
        const fai_score_mods mods = tile_mods(plan, unit, sc, first_key, r0, r0 + m, scale);
        cntx->mods_rows(s_keys, ld_n, m, n_keys, &mods);
        scale = 1.0f;
    } else if (plan->pb.mask_kind == FAI_MASK_ADD || !(scale > 0.0f && scale < 1e30f)) {
        for (int64_t r = 0; r < m; r++)
            for (int64_t c = 0; c < n_keys; c++)
                s_keys[r * ld_n + c] *= scale;
        scale = 1.0f;
    }
    if (masked)
        apply_masks_rows(plan, t, unit, &e->band, e->band_partial, first_key, n_keys,
                         sc->s_tile + keys.begin, ld_n, 1, r0, r0 + m);
    cntx->mx_softmax(s, ld_n, m, FAI_MX_BLOCK_ROWS, n, mt->n_pad, keys.begin, keys.end, scale,
                     sc->row_max + r0, sc->mx_row_sums + r0 * FAI_MX_SUM_LANES, sc->row_alpha + r0,
                     p, p_parts, plan->v_scaled ? sc->v_scales : NULL);
    FAI_LAP(FAI_STAGE_SOFTMAX);
    cntx->rescale_o(sc->o_acc + r0 * plan->ld_o, plan->ld_o, m, sc->row_alpha + r0);
    FAI_LAP(FAI_STAGE_RESCALE);
}

/* The vector stages and PV of one row block: masks, the online softmax into P, O rescaled, and
 * O += P V. */
static void mx_softmax_pv_block(const fai_plan *plan, const fai_tensors *t, const fai_unit *unit,
                                const unit_scratch *sc, const mx_tile *mt, int64_t block,
                                int64_t rows) {
    const fai_cntx *cntx = plan->cntx;
    const int64_t r0 = block * FAI_MX_BLOCK_ROWS, ld_o = plan->ld_o;
    const int64_t m = rows - r0 < FAI_MX_BLOCK_ROWS ? rows - r0 : FAI_MX_BLOCK_ROWS;
    const tile_extent *e = &mt->extent;
    if (plan->pb.mask_kind == FAI_MASK_KEEP_BITS &&
        bits_rows_empty(t, unit, e->key_begin, e->n, r0, r0 + m))
        return; /* a block whose keys are all masked changes nothing */
    uint16_t *p = mx_p_block(plan, sc, block);
    /* a V tile with Inf, NaN or large values takes an f32 PV, and P in f32 (its weights below
     * 2^-118 times such values count) */
    const int sparse = (mt->state & KV_V_EXACT) != 0;
    const int p_parts = sparse ? 0 : plan->p_parts;
    /* the f32 PV reads P for all the tile's keys: the softmax writes them all, over scores the
     * masks set to -inf where QK left keys out */
    const key_range keys = sparse ? (key_range){0, mt->n_pad} : mx_block_keys(unit, mt, r0, m);
    if (FAI_KEEPS(FAI_STAGE_SOFTMAX)) {
        mx_vector_stages(plan, t, unit, sc, mt, r0, m, keys, p, p_parts);
    } else { /* with the masks and modifiers: PV reads the P left from before */
        leave_max_unmoved(sc->row_alpha + r0, FAI_MX_BLOCK_ROWS);
        FAI_LAP(FAI_STAGE_SOFTMAX);
    }
    float *o = sc->o_acc + r0 * ld_o;
    if (!FAI_KEEPS(FAI_STAGE_PV)) {
        /* left out */
    } else if (sparse) {
        cntx->mx_pv_sparse(o, ld_o, p, p_parts, mt->v, plan->mx_v_parts, m, e->n, FAI_MX_BLOCK_ROWS,
                           mt->n_pad, plan->head_dim_v, ld_o);
    } else {
        cntx->mx_pv(o, ld_o, p, plan->p_parts, mt->v, plan->mx_v_parts, FAI_MX_BLOCK_ROWS,
                    mt->n_pad, keys.begin, keys.end, ld_o);
    }
    FAI_LAP(FAI_STAGE_PV);
}

/* The keys of a kv tile (an offset into the unit's range) to ask for ahead of its packing,
 * from *key_begin: its own, or none where the tile is past `tile_end` or the packed cache holds
 * it. With token-major pages a kv head's rows lie a whole token apart, where the hardware
 * prefetchers do not follow: packing waited on every row before its rows were asked for. */
static int64_t mx_keys_ahead(const fai_plan *plan, const fai_unit *unit, const unit_scratch *sc,
                             int64_t tile, int64_t tile_end, int64_t *key_begin) {
    if (tile >= tile_end) return 0;
    const tile_extent e = tile_extent_of(plan, unit, tile);
    unsigned char *cached = NULL;
    const unsigned char *state = kv_cache_find(plan, sc, unit, e.key_begin, &cached);
    *key_begin = e.key_begin;
    return state && *state ? 0 : e.n;
}

/* Share `block` of `blocks` of the `count` keys from `first` that mx_keys_ahead gave, asked for
 * before that row block: the rows spread over the tile's blocks, not in one burst. */
static void mx_prefetch_share(const fai_plan *plan, const fai_tensors *t, const fai_unit *unit,
                              const unit_scratch *sc, int64_t first, int64_t count, int64_t block,
                              int64_t blocks) {
    const int64_t lo = count * block / blocks, hi = count * (block + 1) / blocks;
    prefetch_kv_keys(plan, t, unit, sc, first + lo, hi - lo);
}

/* After a unit's last tile: each row's sum from its lanes (in a fixed order), and a NaN sum (a
 * NaN the row saw) makes the row's max NaN, as the other tables leave it. */
static void mx_end_tiles(const fai_unit *unit, const unit_scratch *sc) {
    for (int64_t r = 0; r < unit->q_len * unit->heads; r++) {
        const float *lanes = sc->mx_row_sums + r * FAI_MX_SUM_LANES;
        float sum = 0.0f;
        for (int lane = 0; lane < FAI_MX_SUM_LANES; lane++)
            sum += lanes[lane];
        sc->row_sum[r] = sum;
        if (isnan(sum)) sc->row_max[r] = sum;
    }
}

/* The quantized K's and V's scales of a tile about to be computed, gathered into the scratch. V
 * scales above 2^64 make the tile's values large as a V of 2^80 would (mx_pack_v): it then takes
 * the f32 PV, with P in f32. */
static void mx_gather_tile_scales(const fai_plan *plan, const fai_unit *unit,
                                  const unit_scratch *sc, mx_tile *mt) {
    const tile_extent *e = &mt->extent;
    if (plan->k_scaled)
        gather_scales(plan, unit, &sc->rows->k_scale, e->key_begin, e->n, sc->k_scales);
    if (plan->v_scaled) {
        gather_scales(plan, unit, &sc->rows->v_scale, e->key_begin, e->n, sc->v_scales);
        if (!scales_fold(sc->v_scales, e->n)) mt->state |= KV_V_EXACT;
    }
}

/* mx_run_tiles with one kv tile in flight: each tile packed (or found in the cache) into the one
 * buffer, then each row block's QK, softmax and PV; the rows of the next tile asked for a share
 * before each block. */
static void mx_run_tiles_one(const fai_plan *plan, const fai_tensors *t, const fai_unit *unit,
                             const fai_unit *next, int64_t tile_begin, int64_t tile_end,
                             const unit_scratch *sc) {
    const int64_t rows = unit->q_len * unit->heads;
    const int64_t blocks = fai__ceil_div(rows, FAI_MX_BLOCK_ROWS);
    for (int64_t tile = tile_begin; tile < tile_end; tile++) {
        if (next)
            prefetch_rows_for_tile(plan, t, sc->rows, unit, next, tile - tile_begin,
                                   tile_end - tile_begin);
        int64_t ahead_begin = 0;
        const int64_t ahead = mx_keys_ahead(plan, unit, sc, tile + 1, tile_end, &ahead_begin);
        mx_tile current = mx_prepare(plan, t, unit, tile, 0, sc);
        mx_gather_tile_scales(plan, unit, sc, &current);
        FAI_LAP(FAI_STAGE_PACK_KV);
        for (int64_t block = 0; block < blocks; block++) {
            mx_prefetch_share(plan, t, unit, sc, ahead_begin, ahead, block, blocks);
            FAI_LAP(FAI_STAGE_PACK_KV);
            mx_qk_block(plan, t, unit, sc, &current, block, rows);
            FAI_LAP(FAI_STAGE_QK);
            mx_softmax_pv_block(plan, t, unit, sc, &current, block, rows);
        }
    }
    mx_end_tiles(unit, sc);
}

/* Step 2 on the matrix engine: the unit's kv tiles [tile_begin, tile_end), pipelined; with the
 * worker's next unit (or NULL), its Q rows and this unit's O rows prefetched along the way. */
static void mx_run_tiles(const fai_plan *plan, const fai_tensors *t, const fai_unit *unit,
                         const fai_unit *next, int64_t tile_begin, int64_t tile_end,
                         const unit_scratch *sc) {
    if (plan->mx_pipeline == 1) {
        mx_run_tiles_one(plan, t, unit, next, tile_begin, tile_end, sc);
        return;
    }
    const int64_t rows = unit->q_len * unit->heads;
    const int64_t blocks = fai__ceil_div(rows, FAI_MX_BLOCK_ROWS);
    mx_tile tiles[2];
    if (tile_begin < tile_end) {
        int64_t first = 0;
        const int64_t count = mx_keys_ahead(plan, unit, sc, tile_begin + 1, tile_end, &first);
        prefetch_kv_keys(plan, t, unit, sc, first, count);
        tiles[0] = mx_prepare(plan, t, unit, tile_begin, 0, sc);
        FAI_LAP(FAI_STAGE_PACK_KV);
        for (int64_t block = 0; block < blocks; block++)
            mx_qk_block(plan, t, unit, sc, &tiles[0], block, rows);
        FAI_LAP(FAI_STAGE_QK);
    }
    for (int64_t tile = tile_begin; tile < tile_end; tile++) {
        const int current = (int)((tile - tile_begin) & 1);
        const int has_next = tile + 1 < tile_end;
        if (next)
            prefetch_rows_for_tile(plan, t, sc->rows, unit, next, tile - tile_begin,
                                   tile_end - tile_begin);
        if (has_next) tiles[1 - current] = mx_prepare(plan, t, unit, tile + 1, 1 - current, sc);
        mx_gather_tile_scales(plan, unit, sc, &tiles[current]);
        /* the rows of the tile packed after the next one, a share before each row block */
        int64_t ahead_begin = 0;
        const int64_t ahead = mx_keys_ahead(plan, unit, sc, tile + 2, tile_end, &ahead_begin);
        FAI_LAP(FAI_STAGE_PACK_KV);
        for (int64_t block = 0; block < blocks; block++) {
            mx_prefetch_share(plan, t, unit, sc, ahead_begin, ahead, block, blocks);
            FAI_LAP(FAI_STAGE_PACK_KV);
            mx_softmax_pv_block(plan, t, unit, sc, &tiles[current], block, rows);
            if (has_next) mx_qk_block(plan, t, unit, sc, &tiles[1 - current], block, rows);
            FAI_LAP(FAI_STAGE_QK);
        }
    }
    mx_end_tiles(unit, sc);
}
