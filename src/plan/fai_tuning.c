/* The tuning cache: measured tile choices per (CPU model, micro-kernel table, shape class), in a
 * plain text file that `fai tune` writes and every plan reads (see fai.h). The file is the only
 * state shared between processes; inside a process it is read once into a small table guarded by
 * a mutex, so a plan pays one lookup, not a file read.
 *
 * One line per entry, tab-separated:  cpu model \t isa \t shape class \t tile_q \t tile_kv
 * Lines starting with '#' and lines that do not parse are skipped. */
#include "arch/fai_cpuid.h"
#include "fai_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_TUNED_TILE 4096
#define KEY_BYTES 320

typedef struct tuned_entry {
    char key[KEY_BYTES]; /* cpu \t isa \t class */
    int64_t tile_q, tile_kv;
} tuned_entry;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static tuned_entry *cache_entries;
static size_t cache_count;
static int cache_loaded;

/* -- where the file is ------------------------------------------------------------------------ */

static int cache_path(char *buf, size_t size) {
    const char *forced = getenv("FAI_TUNE_CACHE");
    if (forced && forced[0]) {
        if (strcmp(forced, "off") == 0) return 0;
        return snprintf(buf, size, "%s", forced) < (int)size;
    }
    const char *xdg = getenv("XDG_CACHE_HOME");
    if (xdg && xdg[0]) return snprintf(buf, size, "%s/fai/tiles.tsv", xdg) < (int)size;
    const char *home = getenv("HOME");
    if (home && home[0]) return snprintf(buf, size, "%s/.cache/fai/tiles.tsv", home) < (int)size;
    return 0;
}

static void entry_key(const fai_plan *plan, char *key, size_t size) {
    snprintf(key, size, "%s\t%s\t%s", fai__cpu_model(), plan->cntx->name, plan->tile_class);
}

/* -- the shape class -------------------------------------------------------------------------- */

static int64_t pow2_at_least(int64_t n) {
    int64_t p = 1;
    while (p < n && p < (INT64_C(1) << 40))
        p <<= 1;
    return p;
}

void fai__tuning_class(fai_plan *plan, int64_t max_q, int64_t max_kv) {
    const fai_problem *pb = &plan->pb;
    const int masked = pb->causal != FAI_CAUSAL_NONE || pb->window_left >= 0 ||
                       pb->window_right >= 0 || plan->has_positions;
    snprintf(plan->tile_class, sizeof plan->tile_class,
             "d%" PRId64 ".dv%" PRId64 ".g%" PRId64 ".%s.%s.%s.q%" PRId64 ".kv%" PRId64 ".%s.%s",
             pb->head_dim, plan->head_dim_v, plan->group, fai_dtype_name(pb->q_dtype),
             fai_dtype_name(pb->k_dtype), fai_dtype_name(pb->v_dtype), pow2_at_least(max_q),
             pow2_at_least(max_kv), masked ? "causal" : "full", plan->paged ? "paged" : "dense");
}

/* -- reading and writing the file -------------------------------------------------------------- */

static int parse_line(char *line, tuned_entry *entry) {
    if (line[0] == '#') return 0;
    line[strcspn(line, "\r\n")] = '\0';
    /* the key is the first three fields; the tiles follow */
    char *tab = line;
    for (int field = 0; field < 3; field++) {
        tab = strchr(tab, '\t');
        if (!tab) return 0;
        tab++;
    }
    const size_t key_len = (size_t)(tab - 1 - line);
    if (key_len == 0 || key_len >= KEY_BYTES) return 0;
    char *end;
    errno = 0;
    const long long tile_q = strtoll(tab, &end, 10);
    if (end == tab || *end != '\t' || errno) return 0;
    const char *second = end + 1;
    const long long tile_kv = strtoll(second, &end, 10);
    if (end == second || *end != '\0' || errno) return 0;
    if (tile_q < 1 || tile_q > MAX_TUNED_TILE || tile_kv < 1 || tile_kv > MAX_TUNED_TILE) return 0;
    memcpy(entry->key, line, key_len);
    entry->key[key_len] = '\0';
    entry->tile_q = tile_q;
    entry->tile_kv = tile_kv;
    return 1;
}

/* Reads the whole file into a fresh table (later lines win). Called with the lock held. */
static void load_locked(void) {
    free(cache_entries);
    cache_entries = NULL;
    cache_count = 0;
    cache_loaded = 1;
    char path[1024];
    if (!cache_path(path, sizeof path)) return;
    FILE *f = fopen(path, "r");
    if (!f) return;
    size_t capacity = 0;
    char line[KEY_BYTES + 64];
    while (fgets(line, sizeof line, f)) {
        if (!strchr(line, '\n') && !feof(f)) { /* too long to be ours: skip the rest of it */
            int c;
            while ((c = fgetc(f)) != EOF && c != '\n') {
            }
            continue;
        }
        tuned_entry entry;
        if (!parse_line(line, &entry)) continue;
        size_t i = 0;
        while (i < cache_count && strcmp(cache_entries[i].key, entry.key) != 0)
            i++;
        if (i == cache_count) {
            if (cache_count == capacity) {
                const size_t grown = capacity ? 2 * capacity : 16;
                tuned_entry *more = realloc(cache_entries, grown * sizeof *more);
                if (!more) break;
                cache_entries = more;
                capacity = grown;
            }
            cache_count++;
        }
        cache_entries[i] = entry;
    }
    fclose(f);
}

int fai__tuning_lookup(const fai_plan *plan, int64_t *tile_q, int64_t *tile_kv) {
    char key[KEY_BYTES];
    entry_key(plan, key, sizeof key);
    int found = 0;
    pthread_mutex_lock(&cache_lock);
    if (!cache_loaded) load_locked();
    for (size_t i = 0; i < cache_count && !found; i++)
        if (strcmp(cache_entries[i].key, key) == 0) {
            *tile_q = cache_entries[i].tile_q;
            *tile_kv = cache_entries[i].tile_kv;
            found = 1;
        }
    pthread_mutex_unlock(&cache_lock);
    return found;
}

/* mkdir -p of the file's directory */
static int make_parent_dirs(const char *path) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return 1;
    *slash = '\0';
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) return 0;
        *p = '/';
    }
    return mkdir(dir, 0755) == 0 || errno == EEXIST;
}

/* Rewrites the file with every line of it except the one for `key`, then the new entry, through
 * a temporary file renamed over it (a reader never sees half a file). */
static fai_status write_entry(const char *path, const char *key, int64_t tile_q, int64_t tile_kv) {
    if (!make_parent_dirs(path))
        return fai__fail(FAI_ERR_IO, "tuning cache %s: cannot create its directory: %s", path,
                         strerror(errno));
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    FILE *out = fopen(tmp, "w");
    if (!out) return fai__fail(FAI_ERR_IO, "tuning cache %s: %s", tmp, strerror(errno));
    fprintf(out,
            "# fai tuned tiles: cpu model, isa, shape class, tile_q, tile_kv (tab-separated)\n");
    FILE *in = fopen(path, "r");
    if (in) {
        char line[KEY_BYTES + 64];
        while (fgets(line, sizeof line, in)) {
            tuned_entry entry;
            char copy[sizeof line];
            memcpy(copy, line, sizeof line);
            if (parse_line(copy, &entry) && strcmp(entry.key, key) != 0) fputs(line, out);
        }
        fclose(in);
    }
    fprintf(out, "%s\t%" PRId64 "\t%" PRId64 "\n", key, tile_q, tile_kv);
    const int written = fflush(out) == 0 && !ferror(out);
    if (fclose(out) != 0 || !written || rename(tmp, path) != 0) {
        const int saved = errno;
        remove(tmp);
        return fai__fail(FAI_ERR_IO, "tuning cache %s: %s", path, strerror(saved));
    }
    return FAI_OK;
}

fai_status fai_tuning_store(const fai_plan *plan, int64_t tile_q, int64_t tile_kv) {
    fai__clear_error();
    if (!plan) return fai__fail(FAI_ERR_INVALID_ARG, "plan = NULL");
    if (tile_q < 1 || tile_q > MAX_TUNED_TILE)
        return fai__fail(FAI_ERR_INVALID_ARG, "tile_q = %" PRId64 " is outside 1..%d", tile_q,
                         MAX_TUNED_TILE);
    if (tile_kv < 1 || tile_kv > MAX_TUNED_TILE)
        return fai__fail(FAI_ERR_INVALID_ARG, "tile_kv = %" PRId64 " is outside 1..%d", tile_kv,
                         MAX_TUNED_TILE);
    char path[1024];
    if (!cache_path(path, sizeof path))
        return fai__fail(FAI_ERR_INVALID_ARG,
                         "the tuning cache is disabled (FAI_TUNE_CACHE=off, or no HOME)");
    char key[KEY_BYTES];
    entry_key(plan, key, sizeof key);
    pthread_mutex_lock(&cache_lock);
    const fai_status status = write_entry(path, key, tile_q, tile_kv);
    if (status == FAI_OK) load_locked();
    pthread_mutex_unlock(&cache_lock);
    return status;
}

void fai_tuning_reload(void) {
    pthread_mutex_lock(&cache_lock);
    free(cache_entries);
    cache_entries = NULL;
    cache_count = 0;
    cache_loaded = 0;
    pthread_mutex_unlock(&cache_lock);
}

const char *fai_tuning_path(void) {
    static _Thread_local char path[1024];
    if (!cache_path(path, sizeof path)) path[0] = '\0';
    return path;
}
