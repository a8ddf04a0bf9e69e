/* The unfused CBLAS attention of `fai bench --baseline` (see fai_baseline.h). Without a CBLAS at
 * build time only ft_baseline_available() and ft_baseline_blas() do anything. */
/* dladdr (naming the BLAS library) is a GNU extension */
#define _GNU_SOURCE
#include "fai_baseline.h"

#ifndef FAI_HAVE_CBLAS

int ft_baseline_available(void) { return 0; }
const char *ft_baseline_blas(void) { return "none"; }
int ft_baseline_create(const ft_shape *shape, const ft_shape_data *data, int64_t max_threads,
                       ft_baseline **baseline) {
    *baseline = NULL;
    return -1;
}
int ft_baseline_run(ft_baseline *baseline, int64_t threads) { return -1; }
double ft_baseline_score_bytes(const ft_baseline *baseline) { return 0.0; }
double ft_baseline_gemm_flops(const ft_baseline *baseline) { return 0.0; }
double ft_baseline_compare(const ft_baseline *baseline, const ft_shape_data *data, int rows,
                           uint64_t seed) {
    return 0.0;
}
void ft_baseline_free(ft_baseline *baseline) {}

#else

#include "fai_baseline_softmax.h"
#include "fai_oracle.h"

#include <cblas.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One thread's scratch: the scores of the (batch, kv head) pair it works on, and the pair's
 * stacked Q and O rows. */
typedef struct baseline_scratch {
    float *scores; /* [rows, keys] */
    float *q_rows; /* [rows, D] */
    float *o_rows; /* [rows, Dv] */
} baseline_scratch;

typedef ft_baseline_softmax_row_fn softmax_row_fn;

typedef struct baseline_worker {
    struct ft_baseline *bl;
    int64_t index;
} baseline_worker;

/* A persistent team, as an OpenMP runtime keeps one: max_threads - 1 threads started once, which
 * sleep between runs; a run wakes them by bumping the generation. */
typedef struct baseline_team {
    pthread_mutex_t lock;
    pthread_cond_t start, done;
    int64_t generation, active, finished, started;
    int stop;
    pthread_t *ids;
    baseline_worker *workers; /* [max_threads]; workers[0] is the caller */
} baseline_team;

struct ft_baseline {
    int64_t b, hq, hkv, group, sq, skv, d, dv;
    int64_t rows;           /* group * sq: the stacked rows of one pair */
    int64_t key_lo, key_hi; /* keys [lo, hi) some query sees: the columns of S */
    int64_t *first, *last;  /* [sq]: the keys query i sees, first > last when none */
    float scale;
    float *q, *k, *v, *o; /* f32 Q [B,Sq,Hq,D], K [B,Hkv,Skv,D], V [B,Hkv,Skv,Dv], O */
    baseline_scratch *scratch;
    int64_t max_threads;
    atomic_llong next_pair; /* the next (batch, kv head) pair to take */
    baseline_team team;
    int team_ready;
    softmax_row_fn *softmax_row; /* the row softmax compiled for this CPU's vectors */
};

static int start_team(ft_baseline *bl);
static void stop_team(ft_baseline *bl);

int ft_baseline_available(void) { return 1; }

const char *ft_baseline_blas(void) {
#ifdef FAI_HAVE_OPENBLAS
    static char text[256];
    if (!text[0])
        snprintf(text, sizeof text, "%s; core %s", openblas_get_config(), openblas_get_corename());
    return text;
#else
    /* not OpenBLAS: name the file, so that a slow reference BLAS is seen for what it is */
    static char text[256];
    Dl_info info;
    if (!text[0])
        snprintf(text, sizeof text, "CBLAS from %s",
                 dladdr((void *)(uintptr_t)cblas_sgemm, &info) && info.dli_fname
                     ? info.dli_fname
                     : "an unknown library");
    return text;
#endif
}

/* -- preparation (not timed) ------------------------------------------------------------- */

/* Row of key j of sequence b in a K/V tensor: through the block table when paged. */
static int64_t key_row(const ft_shape *shape, const ft_shape_data *data, const fai_tensor *t,
                       int64_t b, int64_t j, int64_t hk) {
    if (!shape->page_size) return b * t->stride_batch + j * t->stride_seq + hk * t->stride_head;
    const int64_t page = data->block_table[b * data->problem.pages_per_seq + j / shape->page_size];
    return page * t->stride_batch + (j % shape->page_size) * t->stride_seq + hk * t->stride_head;
}

/* K or V of every (batch, kv head) as contiguous f32 [Skv, dim] blocks, in sequence order
 * (a quantized one dequantized with its scales, and K's channel scales: `channels`, or NULL). */
static float *gather_kv(const ft_shape *shape, const ft_shape_data *data, const fai_tensor *t,
                        const fai_scale *scale, const fai_channel_scale *channels, int64_t dim) {
    const size_t count = (size_t)(shape->b * shape->hkv * shape->skv * dim);
    float *out = ft_shape_alloc_huge(count * sizeof *out + 1);
    if (!out) return NULL;
    for (int64_t b = 0; b < shape->b; b++)
        for (int64_t hk = 0; hk < shape->hkv; hk++)
            for (int64_t j = 0; j < shape->skv; j++) {
                float *row = out + ((b * shape->hkv + hk) * shape->skv + j) * dim;
                const int64_t at = key_row(shape, data, t, b, j, hk);
                const int64_t page =
                    shape->page_size
                        ? data->block_table[b * data->problem.pages_per_seq + j / shape->page_size]
                        : b;
                const double factor =
                    ft_shape_scale(t, scale, page, shape->page_size ? j % shape->page_size : j, hk);
                for (int64_t x = 0; x < dim; x++)
                    row[x] = (float)(factor * fai_oracle_load(t->data, t->dtype, at + x) *
                                     ft_shape_channel_scale(channels, hk, x));
            }
    return out;
}

static float *convert_q(const ft_shape *shape, const fai_tensor *t) {
    float *out = ft_shape_alloc_huge(
        (size_t)(shape->b * shape->sq * shape->hq * shape->d) * sizeof *out + 1);
    if (!out) return NULL;
    float *row = out;
    for (int64_t b = 0; b < shape->b; b++)
        for (int64_t i = 0; i < shape->sq; i++)
            for (int64_t h = 0; h < shape->hq; h++, row += shape->d) {
                const int64_t at = b * t->stride_batch + i * t->stride_seq + h * t->stride_head;
                for (int64_t x = 0; x < shape->d; x++)
                    row[x] = (float)fai_oracle_load(t->data, t->dtype, at + x);
            }
    return out;
}

static void set_single_threaded_blas(void) {
#ifdef FAI_HAVE_OPENBLAS
    openblas_set_num_threads(1);
#endif
    /* other BLAS: OPENBLAS_NUM_THREADS=1 / OMP_NUM_THREADS=1 in the environment */
}

int ft_baseline_create(const ft_shape *shape, const ft_shape_data *data, int64_t max_threads,
                       ft_baseline **baseline) {
    ft_baseline *bl = calloc(1, sizeof *bl);
    *baseline = NULL;
    if (!bl) return -1;
    set_single_threaded_blas();
    bl->softmax_row = ft_baseline_pick_softmax_row();
    bl->b = shape->b;
    bl->hq = shape->hq;
    bl->hkv = shape->hkv;
    bl->group = shape->hq / shape->hkv;
    bl->sq = shape->sq;
    bl->skv = shape->skv;
    bl->d = shape->d;
    bl->dv = shape->dv;
    bl->rows = bl->group * bl->sq;
    /* a problem that plans has a NaN scale only as FAI_SCALE_DEFAULT */
    bl->scale = isnan(data->problem.scale) ? 1.0f / sqrtf((float)bl->d) : data->problem.scale;
    const int64_t pairs = bl->b * bl->hkv;
    bl->max_threads = max_threads < pairs ? max_threads : pairs;
    if (bl->max_threads < 1) bl->max_threads = 1;
    atomic_init(&bl->next_pair, 0);

    /* the columns of S: from the first query's first key to the last query's last key */
    bl->first = malloc((size_t)(bl->sq + 1) * sizeof *bl->first);
    bl->last = malloc((size_t)(bl->sq + 1) * sizeof *bl->last);
    int ok = bl->first && bl->last;
    bl->key_lo = bl->skv;
    bl->key_hi = 0;
    for (int64_t i = 0; ok && i < bl->sq; i++) {
        ft_shape_visible_keys(shape, i, &bl->first[i], &bl->last[i]);
        if (bl->first[i] > bl->last[i]) continue;
        if (bl->first[i] < bl->key_lo) bl->key_lo = bl->first[i];
        if (bl->last[i] + 1 > bl->key_hi) bl->key_hi = bl->last[i] + 1;
    }
    if (bl->key_hi < bl->key_lo) bl->key_hi = bl->key_lo;

    if (ok) {
        bl->q = convert_q(shape, &data->tensors.q);
        bl->k = gather_kv(shape, data, &data->tensors.k, &data->tensors.k_scale,
                          &data->tensors.k_channel_scale, bl->d);
        bl->v = gather_kv(shape, data, &data->tensors.v, &data->tensors.v_scale, NULL, bl->dv);
        bl->o = ft_shape_alloc_huge((size_t)(bl->b * bl->sq * bl->hq * bl->dv) * sizeof *bl->o + 1);
        bl->scratch = calloc((size_t)bl->max_threads, sizeof *bl->scratch);
        ok = bl->q && bl->k && bl->v && bl->o && bl->scratch;
    }
    const int64_t keys = bl->key_hi - bl->key_lo;
    /* cblas takes int sizes */
    if (bl->rows > INT32_MAX || keys > INT32_MAX) ok = 0;
    for (int64_t t = 0; ok && t < bl->max_threads; t++) {
        baseline_scratch *s = &bl->scratch[t];
        s->scores = ft_shape_alloc_huge((size_t)(bl->rows * keys) * sizeof(float) + 1);
        s->q_rows = malloc((size_t)(bl->rows * bl->d) * sizeof(float) + 1);
        s->o_rows = malloc((size_t)(bl->rows * bl->dv) * sizeof(float) + 1);
        ok = s->scores && s->q_rows && s->o_rows;
    }
    if (ok) ok = !start_team(bl);
    if (!ok) {
        ft_baseline_free(bl);
        return -1;
    }
    *baseline = bl;
    return 0;
}

void ft_baseline_free(ft_baseline *bl) {
    if (!bl) return;
    stop_team(bl);
    for (int64_t t = 0; bl->scratch && t < bl->max_threads; t++) {
        free(bl->scratch[t].scores);
        free(bl->scratch[t].q_rows);
        free(bl->scratch[t].o_rows);
    }
    free(bl->scratch);
    free(bl->first);
    free(bl->last);
    free(bl->q);
    free(bl->k);
    free(bl->v);
    free(bl->o);
    free(bl);
}

double ft_baseline_score_bytes(const ft_baseline *bl) {
    return (double)bl->rows * (double)(bl->key_hi - bl->key_lo) * sizeof(float);
}

double ft_baseline_gemm_flops(const ft_baseline *bl) {
    return 2.0 * (double)(bl->b * bl->hkv) * (double)bl->rows * (double)(bl->key_hi - bl->key_lo) *
           (double)(bl->d + bl->dv);
}

/* -- the run ------------------------------------------------------------------------------ */

/* Attention of one (batch, kv head) pair: stack the group's Q rows (row i*G + g), two GEMMs
 * around the softmax, and scatter the O rows back to [B, Sq, Hq, Dv]. */
static void run_pair(ft_baseline *bl, int64_t pair, const baseline_scratch *s) {
    const int64_t b = pair / bl->hkv, hk = pair % bl->hkv;
    const int64_t g_bytes = bl->group * bl->d * (int64_t)sizeof(float);
    const int64_t keys = bl->key_hi - bl->key_lo;
    for (int64_t i = 0; i < bl->sq; i++)
        memcpy(s->q_rows + i * bl->group * bl->d,
               bl->q + ((b * bl->sq + i) * bl->hq + hk * bl->group) * bl->d, (size_t)g_bytes);
    if (keys > 0) {
        const float *k = bl->k + ((b * bl->hkv + hk) * bl->skv + bl->key_lo) * bl->d;
        const float *v = bl->v + ((b * bl->hkv + hk) * bl->skv + bl->key_lo) * bl->dv;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)bl->rows, (int)keys, (int)bl->d,
                    bl->scale, s->q_rows, (int)bl->d, k, (int)bl->d, 0.0f, s->scores, (int)keys);
        for (int64_t r = 0; r < bl->rows; r++) {
            const int64_t i = r / bl->group;
            bl->softmax_row(s->scores + r * keys, keys, bl->first[i] - bl->key_lo,
                            bl->last[i] - bl->key_lo);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)bl->rows, (int)bl->dv,
                    (int)keys, 1.0f, s->scores, (int)keys, v, (int)bl->dv, 0.0f, s->o_rows,
                    (int)bl->dv);
    } else {
        memset(s->o_rows, 0, (size_t)(bl->rows * bl->dv) * sizeof(float));
    }
    for (int64_t i = 0; i < bl->sq; i++)
        memcpy(bl->o + ((b * bl->sq + i) * bl->hq + hk * bl->group) * bl->dv,
               s->o_rows + i * bl->group * bl->dv, (size_t)(bl->group * bl->dv) * sizeof(float));
}

/* Takes pairs until none is left. */
static void work(const baseline_worker *w) {
    ft_baseline *bl = w->bl;
    const int64_t pairs = bl->b * bl->hkv;
    for (;;) {
        const int64_t pair = (int64_t)atomic_fetch_add(&bl->next_pair, 1);
        if (pair >= pairs) break;
        run_pair(bl, pair, &bl->scratch[w->index]);
    }
}

static void *team_thread(void *arg) {
    const baseline_worker *w = arg;
    baseline_team *team = &w->bl->team;
    int64_t seen = 0;
    pthread_mutex_lock(&team->lock);
    for (;;) {
        while (team->generation == seen && !team->stop)
            pthread_cond_wait(&team->start, &team->lock);
        if (team->stop) break;
        seen = team->generation;
        const int takes_part = w->index < team->active;
        pthread_mutex_unlock(&team->lock);
        if (takes_part) work(w);
        pthread_mutex_lock(&team->lock);
        if (takes_part && ++team->finished == team->active - 1) pthread_cond_signal(&team->done);
    }
    pthread_mutex_unlock(&team->lock);
    return NULL;
}

static int start_team(ft_baseline *bl) {
    baseline_team *team = &bl->team;
    team->ids = calloc((size_t)bl->max_threads, sizeof *team->ids);
    team->workers = calloc((size_t)bl->max_threads, sizeof *team->workers);
    if (!team->ids || !team->workers) return -1;
    for (int64_t t = 0; t < bl->max_threads; t++)
        team->workers[t] = (baseline_worker){bl, t};
    if (pthread_mutex_init(&team->lock, NULL)) return -1;
    if (pthread_cond_init(&team->start, NULL) || pthread_cond_init(&team->done, NULL)) {
        pthread_mutex_destroy(&team->lock);
        return -1;
    }
    bl->team_ready = 1;
    for (team->started = 1; team->started < bl->max_threads; team->started++)
        if (pthread_create(&team->ids[team->started], NULL, team_thread,
                           &team->workers[team->started]))
            return -1;
    return 0;
}

static void stop_team(ft_baseline *bl) {
    baseline_team *team = &bl->team;
    if (bl->team_ready) {
        pthread_mutex_lock(&team->lock);
        team->stop = 1;
        pthread_cond_broadcast(&team->start);
        pthread_mutex_unlock(&team->lock);
        for (int64_t t = 1; t < team->started; t++)
            pthread_join(team->ids[t], NULL);
        pthread_cond_destroy(&team->start);
        pthread_cond_destroy(&team->done);
        pthread_mutex_destroy(&team->lock);
    }
    free(team->ids);
    free(team->workers);
}

int ft_baseline_run(ft_baseline *bl, int64_t threads) {
    baseline_team *team = &bl->team;
    if (threads > bl->max_threads) threads = bl->max_threads;
    if (threads < 1) threads = 1;
    atomic_store(&bl->next_pair, 0);
    pthread_mutex_lock(&team->lock);
    team->active = threads;
    team->finished = 0;
    team->generation++;
    pthread_cond_broadcast(&team->start);
    pthread_mutex_unlock(&team->lock);
    work(&team->workers[0]); /* the caller is thread 0 */
    pthread_mutex_lock(&team->lock);
    while (team->finished < threads - 1)
        pthread_cond_wait(&team->done, &team->lock);
    pthread_mutex_unlock(&team->lock);
    return 0;
}

/* -- comparison with fai ------------------------------------------------------------------ */

double ft_baseline_compare(const ft_baseline *bl, const ft_shape_data *data, int rows,
                           uint64_t seed) {
    if (bl->b <= 0 || bl->sq <= 0) return 0.0;
    const fai_tensor *o = &data->tensors.o;
    double worst = 0.0;
    for (int s = 0; s < rows; s++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        const int64_t b = (int64_t)((seed >> 16) % (uint64_t)bl->b);
        const int64_t i = (int64_t)((seed >> 24) % (uint64_t)bl->sq);
        const int64_t h = (int64_t)((seed >> 40) % (uint64_t)bl->hq);
        const float *mine = bl->o + ((b * bl->sq + i) * bl->hq + h) * bl->dv;
        const int64_t at = b * o->stride_batch + i * o->stride_seq + h * o->stride_head;
        for (int64_t x = 0; x < bl->dv; x++) {
            const double theirs = fai_oracle_load(o->data, o->dtype, at + x);
            const double err = fabs((double)mine[x] - theirs) / fmax(1.0, fabs(theirs));
            if (!(err <= worst)) worst = isnan(err) ? INFINITY : err;
        }
    }
    return worst;
}

#endif
