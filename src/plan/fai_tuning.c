/* The tuning cache: measured tile choices per (CPU model, micro-kernel table, shape class), in a
 * plain text file that `fai tune` writes and every plan reads (see fai.h). The file is the only
 * state shared between processes; inside a process it is read once into a small table guarded by
 * a mutex, so a plan pays one lookup, not a file read.
 *
 * One line per entry, tab-separated:  cpu model \t isa \t shape class \t tile_q \t tile_kv
 * Lines starting with '#' and lines that do not parse are skipped (and dropped by the next
 * store, which writes back each entry it read in this form). */
#define _XOPEN_SOURCE 700 /* realpath */
#include "arch/fai_cpuid.h"
#include "fai_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_TUNED_TILE 4096
#define KEY_BYTES 320
/* A tuning file holds a few lines per shape class measured; past these it is no file of ours,
 * and the rest is not read (nor kept by a store). */
#define MAX_FILE_BYTES (1 << 20)
#define MAX_ENTRIES 4096

typedef struct tuned_entry {
    char key[KEY_BYTES]; /* cpu \t isa \t class */
    int64_t tile_q, tile_kv;
} tuned_entry;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static tuned_entry *cache_entries;
static size_t cache_count;
static int cache_loaded;

/* -- where the file is ------------------------------------------------------------------------ */

#define PATH_BYTES 1024

/* The file's path into buf: 1, or 0 when the cache is off or no directory is known; -1 when the
 * environment gives a path too long for buf (*source names the variable it came from). */
static int cache_path(char *buf, size_t size, const char **source) {
    const char *forced = getenv("FAI_TUNE_CACHE");
    if (forced && forced[0]) {
        *source = "FAI_TUNE_CACHE";
        if (strcmp(forced, "off") == 0) return 0;
        return snprintf(buf, size, "%s", forced) < (int)size ? 1 : -1;
    }
    const char *xdg = getenv("XDG_CACHE_HOME");
    if (xdg && xdg[0]) {
        *source = "XDG_CACHE_HOME";
        return snprintf(buf, size, "%s/fai/tiles.tsv", xdg) < (int)size ? 1 : -1;
    }
    const char *home = getenv("HOME");
    *source = "HOME";
    if (home && home[0])
        return snprintf(buf, size, "%s/.cache/fai/tiles.tsv", home) < (int)size ? 1 : -1;
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

/* Opens the file for reading if it is a regular file: a FIFO, a device or a directory named by
 * the environment is no tuning file, and opening or reading one could block every plan of the
 * process (O_NONBLOCK keeps the open itself from waiting for a FIFO's writer). NULL with errno
 * set (ENOENT: no file; EINVAL: not a regular file). */
static FILE *open_regular(const char *path) {
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        errno = EINVAL;
        return NULL;
    }
    FILE *f = fdopen(fd, "r");
    if (!f) close(fd);
    return f;
}

/* Reads one line (without its newline) into buf. Returns 0 at the end of the file, else 1 with
 * *usable 0 for a line too long for buf or holding a NUL byte (no line of ours): the whole line
 * is consumed either way, so the next call starts on the next line. *budget counts the bytes the
 * file may still give; at 0 the file reads as ended. */
static int read_line(FILE *f, char *buf, size_t size, int *usable, size_t *budget) {
    size_t length = 0;
    int c = EOF, any = 0;
    *usable = 1;
    while (*budget > 0 && (c = getc(f)) != EOF) {
        (*budget)--;
        any = 1;
        if (c == '\n') break;
        if (c == '\0' || length + 1 >= size)
            *usable = 0;
        else
            buf[length++] = (char)c;
    }
    /* a line the budget cut is not whole (its last number may be cut short), unless the file
     * or the line ends there too */
    if (any && c != '\n' && c != EOF && *budget == 0) {
        const int next = getc(f);
        if (next != EOF && next != '\n') *usable = 0;
    }
    buf[length] = '\0';
    return any;
}

/* The first line of every file a store writes: a store replaces no other file. */
#define FILE_HEADER                                                                                \
    "# fai tuned tiles: cpu model, isa, shape class, tile_q, tile_kv (tab-separated)"

/* Reads up to MAX_FILE_BYTES of the file into a fresh table (later lines win); a larger file is
 * no file of ours, and its tail is ignored. *ours (when not NULL) says whether the file is empty
 * or starts with FILE_HEADER. Returns 0, or -1 with errno set (and no table) when the file exists
 * but cannot be read (a store must not then replace it). Called with the lock held. */
static int read_entries(const char *path, tuned_entry **entries, size_t *count, int *ours) {
    *entries = NULL;
    *count = 0;
    if (ours) *ours = 1;
    FILE *f = open_regular(path);
    if (!f) return errno == ENOENT ? 0 : -1;
    size_t capacity = 0, budget = MAX_FILE_BYTES;
    char line[KEY_BYTES + 64];
    int usable, first = 1;
    while (read_line(f, line, sizeof line, &usable, &budget)) {
        if (first && ours) *ours = usable && strcmp(line, FILE_HEADER) == 0;
        first = 0;
        tuned_entry entry;
        if (!usable || !parse_line(line, &entry)) continue;
        size_t i = 0;
        while (i < *count && strcmp((*entries)[i].key, entry.key) != 0)
            i++;
        if (i == *count) {
            if (*count == MAX_ENTRIES) continue;
            if (*count == capacity) {
                const size_t grown = capacity ? 2 * capacity : 16;
                tuned_entry *more = realloc(*entries, grown * sizeof *more);
                if (!more) {
                    fclose(f);
                    free(*entries);
                    *entries = NULL;
                    *count = 0;
                    errno = ENOMEM;
                    return -1;
                }
                *entries = more;
                capacity = grown;
            }
            (*count)++;
        }
        (*entries)[i] = entry;
    }
    const int failed = ferror(f);
    fclose(f);
    if (failed) {
        free(*entries);
        *entries = NULL;
        *count = 0;
        errno = EIO;
    }
    return failed ? -1 : 0;
}

/* Reads the file into the process's table (nothing when it is missing or unreadable: plans then
 * choose by rule). Called with the lock held. */
static void load_locked(void) {
    free(cache_entries);
    cache_entries = NULL;
    cache_count = 0;
    cache_loaded = 1;
    char path[PATH_BYTES];
    const char *source;
    if (cache_path(path, sizeof path, &source) != 1) return;
    if (read_entries(path, &cache_entries, &cache_count, NULL) != 0) {
        free(cache_entries);
        cache_entries = NULL;
        cache_count = 0;
    }
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

static fai_status refuse_foreign(const char *path) {
    return fai__fail(FAI_ERR_IO,
                     "tuning cache %s is not a file fai wrote (its first line is not '%.17s ...'): "
                     "not replaced",
                     path, FILE_HEADER);
}

/* The nearest directory of `path` that exists (the file's own, or the one a store creates the
 * rest in) is a directory this process may make files in. */
static fai_status check_nearest_dir(const char *path) {
    char dir[PATH_BYTES];
    snprintf(dir, sizeof dir, "%s", path);
    for (;;) {
        char *slash = strrchr(dir, '/');
        if (!slash) {
            snprintf(dir, sizeof dir, ".");
        } else {
            if (slash == dir) slash++; /* the root */
            *slash = '\0';
        }
        struct stat st;
        if (stat(dir, &st) == 0) {
            if (!S_ISDIR(st.st_mode))
                return fai__fail(FAI_ERR_IO, "tuning cache %s: %s is not a directory", path, dir);
            if (access(dir, W_OK | X_OK) != 0)
                return fai__fail(FAI_ERR_IO, "tuning cache %s: cannot make files in %s: %s", path,
                                 dir, strerror(errno));
            return FAI_OK;
        }
        if (errno != ENOENT || strcmp(dir, ".") == 0 || strcmp(dir, "/") == 0)
            return fai__fail(FAI_ERR_IO, "tuning cache %s: %s: %s", path, dir, strerror(errno));
    }
}

/* Whether a store may write the file at `path`, before anything is made: a name that is not a
 * directory's, a regular file fai wrote (or nothing, or a link to such a file), writable (a file
 * its owner made read-only is left as it was), or a place where it can be made. Fills target
 * (the file a store replaces: the path, or a link's target) and *exists, *st. */
static fai_status check_target(const char *path, char target[PATH_BYTES], int *exists,
                               struct stat *st) {
    const size_t length = strlen(path);
    if (length == 0 || path[length - 1] == '/')
        return fai__fail(FAI_ERR_IO, "tuning cache '%s' names a directory, not a file", path);
    *exists = stat(path, st) == 0;
    int stat_errno = errno;
    struct stat link;
    if (!*exists && stat_errno == ENOENT && lstat(path, &link) == 0) {
        /* a link to nowhere, or a file (or a link's target) another writer made since: looked
         * at again, so that two first stores at once do not take each other's file for a link */
        *exists = stat(path, st) == 0;
        stat_errno = errno;
        if (!*exists && stat_errno == ENOENT && S_ISLNK(link.st_mode)) /* its target is not made */
            return fai__fail(FAI_ERR_IO, "tuning cache %s is a dangling symbolic link", path);
    }
    if (*exists && !S_ISREG(st->st_mode))
        return fai__fail(FAI_ERR_IO, "tuning cache %s is not a regular file", path);
    if (!*exists && stat_errno != ENOENT)
        return fai__fail(FAI_ERR_IO, "tuning cache %s: %s", path, strerror(stat_errno));
    if (!*exists) {
        snprintf(target, PATH_BYTES, "%s", path);
        return check_nearest_dir(path);
    }
    char resolved[PATH_MAX];
    if (!realpath(path, resolved) || snprintf(target, PATH_BYTES, "%s", resolved) >= PATH_BYTES)
        return fai__fail(FAI_ERR_IO, "tuning cache %s: cannot resolve its path", path);
    if (access(target, W_OK) != 0)
        return fai__fail(FAI_ERR_IO, "tuning cache %s is not writable (%s): not replaced", target,
                         strerror(errno));
    /* the store makes its lock and temporary files beside the target and renames over it */
    FAI_TRY(check_nearest_dir(target));
    /* someone else's file at the path is never overwritten: checked before the lock file is
     * made beside it, and again under the lock */
    tuned_entry *entries;
    size_t count;
    int ours;
    if (read_entries(target, &entries, &count, &ours) != 0)
        return fai__fail(FAI_ERR_IO, "tuning cache %s cannot be read (%s): not replaced", target,
                         strerror(errno));
    free(entries);
    return ours ? FAI_OK : refuse_foreign(target);
}

/* Rewrites the file with every entry of it except the one for `key`, then the new entry, through
 * a temporary file in the same directory renamed over it: a reader never sees half a file. An
 * advisory lock (fcntl) on `path`.lock serialises the writers of every process, so that two stores
 * at once both land. A symbolic link is written through (its target is replaced, the link stays);
 * anything but a regular file at the path is refused, never replaced. */
static fai_status write_entry(const char *path, const char *key, int64_t tile_q, int64_t tile_kv) {
    char target[PATH_BYTES];
    struct stat st;
    int exists;
    FAI_TRY(check_target(path, target, &exists, &st));
    if (!make_parent_dirs(path))
        return fai__fail(FAI_ERR_IO, "tuning cache %s: cannot create its directory: %s", path,
                         strerror(errno));
    tuned_entry *entries;
    size_t count;
    int ours;
    char lock_path[PATH_BYTES + 8], tmp[PATH_BYTES + 8];
    snprintf(lock_path, sizeof lock_path, "%s.lock", target);
    snprintf(tmp, sizeof tmp, "%s.XXXXXX", target);
    const int lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    struct flock whole = {.l_type = F_WRLCK, .l_whence = SEEK_SET}; /* the whole file */
    int locked;
    do /* waits for the other writer; a signal only interrupts the wait */
        locked = lock_fd >= 0 && fcntl(lock_fd, F_SETLKW, &whole) == 0;
    while (!locked && lock_fd >= 0 && errno == EINTR);
    if (!locked) {
        const int saved = errno;
        if (lock_fd >= 0) close(lock_fd);
        return fai__fail(FAI_ERR_IO, "tuning cache %s: %s", lock_path, strerror(saved));
    }
    fai_status status = FAI_OK;
    if (read_entries(target, &entries, &count, &ours) != 0) {
        status = fai__fail(FAI_ERR_IO, "tuning cache %s cannot be read (%s): not replaced", target,
                           strerror(errno));
        close(lock_fd); /* releases the lock */
        return status;
    }
    if (!ours) { /* replaced while we waited for the lock */
        free(entries);
        close(lock_fd);
        return refuse_foreign(target);
    }
    const int fd = mkstemp(tmp);
    FILE *out = fd < 0 ? NULL : fdopen(fd, "w");
    if (!out) {
        const int saved = errno;
        if (fd >= 0) {
            close(fd);
            remove(tmp);
        }
        free(entries);
        close(lock_fd);
        return fai__fail(FAI_ERR_IO, "tuning cache %s: %s", tmp, strerror(saved));
    }
    /* the file keeps its permissions; a new one is readable by all, as the directory is */
    fchmod(fd, exists ? st.st_mode & 07777 : 0644);
    fprintf(out, "%s\n", FILE_HEADER);
    for (size_t i = 0; i < count; i++) /* each entry rewritten whole, one per line */
        if (strcmp(entries[i].key, key) != 0)
            fprintf(out, "%s\t%" PRId64 "\t%" PRId64 "\n", entries[i].key, entries[i].tile_q,
                    entries[i].tile_kv);
    free(entries);
    fprintf(out, "%s\t%" PRId64 "\t%" PRId64 "\n", key, tile_q, tile_kv);
    const int written = fflush(out) == 0 && !ferror(out);
    if (fclose(out) != 0 || !written || rename(tmp, target) != 0) {
        const int saved = errno;
        remove(tmp);
        status = fai__fail(FAI_ERR_IO, "tuning cache %s: %s", target, strerror(saved));
    }
    close(lock_fd);
    return status;
}

/* A path the environment gives that does not fit: the error names the variable and the start
 * of its value. */
static fai_status fail_long_path(const char *source) {
    const char *value = getenv(source);
    return fai__fail(FAI_ERR_INVALID_ARG,
                     "the tuning cache's path from %s = '%.64s...' is longer than %d bytes", source,
                     value ? value : "", PATH_BYTES - 1);
}

/* The path a store writes, or the error naming why there is none (disabled, or too long). */
static fai_status store_path(char path[PATH_BYTES]) {
    const char *source;
    const int known = cache_path(path, PATH_BYTES, &source);
    if (known < 0) return fail_long_path(source);
    if (known == 0)
        return fai__fail(FAI_ERR_INVALID_ARG,
                         "the tuning cache is disabled (FAI_TUNE_CACHE=off, or no HOME)");
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
    char path[PATH_BYTES];
    FAI_TRY(store_path(path));
    char key[KEY_BYTES];
    entry_key(plan, key, sizeof key);
    pthread_mutex_lock(&cache_lock);
    const fai_status status = write_entry(path, key, tile_q, tile_kv);
    if (status == FAI_OK) load_locked();
    pthread_mutex_unlock(&cache_lock);
    return status;
}

fai_status fai_tuning_check_store(void) {
    fai__clear_error();
    char path[PATH_BYTES], target[PATH_BYTES];
    FAI_TRY(store_path(path));
    struct stat st;
    int exists;
    pthread_mutex_lock(&cache_lock);
    const fai_status status = check_target(path, target, &exists, &st);
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
    static _Thread_local char path[PATH_BYTES];
    const char *source;
    if (cache_path(path, sizeof path, &source) != 1) path[0] = '\0';
    return path;
}
