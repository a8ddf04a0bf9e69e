/* The tuning cache: a stored tile is used by later plans of the same shape class (and reported as
 * "tuned"), not by other classes, not when the problem ignores it or gives its own tile; the
 * file survives garbage lines, and a store keeps every other entry (after a line without its
 * newline, or one holding a NUL byte) and those of another process storing at the same time; a
 * FIFO, a directory or a path too long is refused, never read or replaced, and a symbolic link
 * is written through; a disabled or unwritable cache is an error naming it. Each test points
 * FAI_TUNE_CACHE at its own file and turns the cache off again at the end. */
#include "test_util.h"

#include "fai.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void prefill_problem(fai_problem *pb) {
    fai_problem_init(pb);
    pb->batch = 1, pb->heads_q = 8, pb->heads_kv = 2, pb->seq_q = 300, pb->seq_kv = 300;
    pb->head_dim = 64, pb->causal = FAI_CAUSAL_BOTTOM_RIGHT, pb->workers = 2;
}

/* The plan's info; tile_class lives in the plan, so it is copied out before the plan goes. */
static char tile_class_copy[4][160];
static int copies;

static int plan_tile(const fai_problem *pb, fai_plan_info *info) {
    fai_plan *plan;
    if (fai_plan_create(pb, &plan) != FAI_OK) return 0;
    const int ok = fai_plan_get_info(plan, info) == FAI_OK;
    if (ok) {
        char *copy = tile_class_copy[copies++ % 4];
        snprintf(copy, sizeof tile_class_copy[0], "%s", info->tile_class);
        info->tile_class = copy;
    }
    fai_plan_free(plan);
    return ok;
}

static void use_cache_file(char *path, size_t size) {
    snprintf(path, size, "/tmp/fai_tuning_test_%ld/sub/tiles.tsv", (long)getpid());
    setenv("FAI_TUNE_CACHE", path, 1);
    fai_tuning_reload();
}

static void drop_cache_file(const char *path) {
    remove(path);
    char lock[600];
    snprintf(lock, sizeof lock, "%s.lock", path);
    remove(lock);
    char dir[512];
    snprintf(dir, sizeof dir, "%s", path);
    for (int level = 0; level < 2; level++) {
        *strrchr(dir, '/') = '\0';
        rmdir(dir);
    }
    setenv("FAI_TUNE_CACHE", "off", 1);
    fai_tuning_reload();
}

TEST(tuning_stored_tile_is_used_by_its_class) {
    char path[512];
    use_cache_file(path, sizeof path);
    CHECK(strcmp(fai_tuning_path(), path) == 0);
    fai_problem pb;
    prefill_problem(&pb);
    fai_plan_info before, after, other, ignored;
    REQUIRE(plan_tile(&pb, &before));
    CHECK(strcmp(before.tile_source, "heuristic") == 0);
    CHECK(strstr(before.tile_class, "d64.dv64.g4.f32.f16.f16.q512.kv512.causal.dense") != NULL);
    /* a tile the heuristic would not choose */
    const int64_t want_q = before.tile_q == 8 ? 4 : 8, want_kv = before.tile_kv == 32 ? 16 : 32;
    fai_plan *plan;
    REQUIRE(fai_plan_create(&pb, &plan) == FAI_OK);
    CHECK(fai_tuning_store(plan, want_q, want_kv) == FAI_OK);
    /* storing again replaces the entry rather than adding one */
    CHECK(fai_tuning_store(plan, want_q, want_kv) == FAI_OK);
    fai_plan_free(plan);

    REQUIRE(plan_tile(&pb, &after));
    CHECK(strcmp(after.tile_source, "tuned") == 0);
    CHECK(after.tile_q == want_q && after.tile_kv == want_kv);
    /* a new process reads the same file */
    fai_tuning_reload();
    REQUIRE(plan_tile(&pb, &after));
    CHECK(strcmp(after.tile_source, "tuned") == 0 && after.tile_q == want_q);

    pb.ignore_tuning = 1;
    REQUIRE(plan_tile(&pb, &ignored));
    CHECK(strcmp(ignored.tile_source, "heuristic") == 0);
    CHECK(ignored.tile_q == before.tile_q && ignored.tile_kv == before.tile_kv);
    pb.ignore_tuning = 0;
    pb.tile_q = 2;
    REQUIRE(plan_tile(&pb, &ignored));
    CHECK(strcmp(ignored.tile_source, "user") == 0 && ignored.tile_q == 2);
    pb.tile_q = 0;

    /* another class (another head dim) keeps the heuristic */
    pb.head_dim = 128;
    REQUIRE(plan_tile(&pb, &other));
    CHECK(strcmp(other.tile_source, "heuristic") == 0);

    /* the file holds that one entry */
    int lines = 0;
    FILE *f = fopen(path, "r");
    REQUIRE(f != NULL);
    char line[512];
    while (fgets(line, sizeof line, f))
        lines += line[0] != '#';
    fclose(f);
    CHECK(lines == 1);
    drop_cache_file(path);
}

TEST(tuning_tuned_tile_clamps_to_short_sequences) {
    char path[512];
    use_cache_file(path, sizeof path);
    fai_problem pb;
    prefill_problem(&pb);
    pb.seq_q = pb.seq_kv = 20; /* class q32.kv32 */
    fai_plan *plan;
    REQUIRE(fai_plan_create(&pb, &plan) == FAI_OK);
    CHECK(fai_tuning_store(plan, 64, 512) == FAI_OK); /* larger than the sequences */
    fai_plan_free(plan);
    fai_plan_info info;
    REQUIRE(plan_tile(&pb, &info));
    CHECK(strcmp(info.tile_source, "tuned") == 0);
    CHECK(info.tile_q == 20 && info.tile_kv == 20);
    drop_cache_file(path);
}

TEST(tuning_garbage_lines_are_skipped) {
    char path[512];
    use_cache_file(path, sizeof path);
    fai_problem pb;
    prefill_problem(&pb);
    fai_plan *plan;
    REQUIRE(fai_plan_create(&pb, &plan) == FAI_OK);
    CHECK(fai_tuning_store(plan, 4, 16) == FAI_OK); /* creates the directories and file */
    fai_plan_free(plan);
    FILE *f = fopen(path, "a");
    REQUIRE(f != NULL);
    fputs("garbage without tabs\n\t\t\t\t\nx\ty\tz\t-5\t16\nx\ty\tz\t99999\t16\n", f);
    fputs("x\ty\tz\t4\t16 trailing\nx\ty\tz\tabc\t16\n", f);
    for (int i = 0; i < 2000; i++) /* one very long line */
        fputc('a', f);
    fputs("\n", f);
    fclose(f);
    fai_tuning_reload();
    fai_plan_info info;
    REQUIRE(plan_tile(&pb, &info));
    CHECK(strcmp(info.tile_source, "tuned") == 0 && info.tile_q == 4 && info.tile_kv == 16);
    drop_cache_file(path);
}

TEST(tuning_errors_name_the_problem) {
    fai_problem pb;
    prefill_problem(&pb);
    fai_plan *plan;
    REQUIRE(fai_plan_create(&pb, &plan) == FAI_OK);
    CHECK(fai_tuning_store(NULL, 8, 8) == FAI_ERR_INVALID_ARG);
    CHECK(fai_tuning_store(plan, 0, 8) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "tile_q = 0") != NULL);
    CHECK(fai_tuning_store(plan, 8, 5000) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "tile_kv = 5000") != NULL);
    setenv("FAI_TUNE_CACHE", "off", 1);
    CHECK(fai_tuning_path()[0] == '\0');
    CHECK(fai_tuning_store(plan, 8, 8) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "disabled") != NULL);
    /* a path whose directory cannot be made: a regular file stands in its way */
    char blocker[256];
    snprintf(blocker, sizeof blocker, "/tmp/fai_tuning_blocker_%ld", (long)getpid());
    FILE *f = fopen(blocker, "w");
    REQUIRE(f != NULL);
    fclose(f);
    char path[300];
    snprintf(path, sizeof path, "%s/tiles.tsv", blocker);
    setenv("FAI_TUNE_CACHE", path, 1);
    CHECK(fai_tuning_store(plan, 8, 8) == FAI_ERR_IO);
    CHECK(strstr(fai_last_error(), blocker) != NULL);
    CHECK(strcmp(fai_status_string(FAI_ERR_IO), "FAI_ERR_IO") == 0);
    remove(blocker);
    setenv("FAI_TUNE_CACHE", "off", 1);
    fai_tuning_reload();
    fai_plan_free(plan);
}

/* The whole file as a string (NUL bytes in it end the string early). */
static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char text[8192];
    const size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

TEST(tuning_store_keeps_every_other_entry) {
    char path[512];
    use_cache_file(path, sizeof path);
    fai_problem pb;
    prefill_problem(&pb);
    fai_plan *plan;
    REQUIRE(fai_plan_create(&pb, &plan) == FAI_OK);
    CHECK(fai_tuning_store(plan, 4, 16) == FAI_OK); /* creates the directories and file */
    /* an entry after a line holding a NUL byte, then a last line without its newline */
    FILE *f = fopen(path, "a");
    REQUIRE(f != NULL);
    static const char tail[] = "k\ti\tc\t64\t64\0junk\nx1\ty\tz\t8\t32\nx2\ty\tz\t2\t4";
    fwrite(tail, 1, sizeof tail - 1, f);
    fclose(f);
    fai_tuning_reload();
    fai_plan_info info;
    REQUIRE(plan_tile(&pb, &info)); /* the file still reads */
    CHECK(strcmp(info.tile_source, "tuned") == 0 && info.tile_q == 4 && info.tile_kv == 16);
    CHECK(fai_tuning_store(plan, 8, 16) == FAI_OK);
    const char *text = read_file(path);
    REQUIRE(text != NULL);
    CHECK(strstr(text, "x1\ty\tz\t8\t32\n") != NULL);
    CHECK(strstr(text, "x2\ty\tz\t2\t4\n") != NULL); /* given its newline */
    CHECK(strstr(text, "k\ti\tc") == NULL);          /* the NUL line is no entry */
    REQUIRE(plan_tile(&pb, &info));
    CHECK(strcmp(info.tile_source, "tuned") == 0 && info.tile_q == 8 && info.tile_kv == 16);
    fai_plan_free(plan);
    drop_cache_file(path);
}

TEST(tuning_refuses_what_is_no_file) {
    fai_problem pb;
    prefill_problem(&pb);
    fai_plan *plan;
    REQUIRE(fai_plan_create(&pb, &plan) == FAI_OK);
    char fifo[256], dir[256];
    snprintf(fifo, sizeof fifo, "/tmp/fai_tuning_fifo_%ld", (long)getpid());
    snprintf(dir, sizeof dir, "/tmp/fai_tuning_dir_%ld", (long)getpid());
    REQUIRE(mkfifo(fifo, 0600) == 0);
    REQUIRE(mkdir(dir, 0700) == 0);
    const char *const paths[] = {fifo, dir};
    for (int i = 0; i < 2; i++) {
        setenv("FAI_TUNE_CACHE", paths[i], 1);
        fai_tuning_reload();
        fai_plan_info info; /* read as no file: a FIFO would wait for a writer forever */
        REQUIRE(plan_tile(&pb, &info));
        CHECK(strcmp(info.tile_source, "heuristic") == 0);
        CHECK(fai_tuning_store(plan, 8, 8) == FAI_ERR_IO);
        CHECK(strstr(fai_last_error(), paths[i]) != NULL);
        CHECK(strstr(fai_last_error(), "not a regular file") != NULL);
    }
    struct stat st;
    CHECK(stat(fifo, &st) == 0 && S_ISFIFO(st.st_mode)); /* still there, as it was */
    CHECK(stat(dir, &st) == 0 && S_ISDIR(st.st_mode));
    remove(fifo);
    rmdir(dir);
    /* a regular file fai did not write: read (its lines do not parse), never replaced */
    char other[256];
    snprintf(other, sizeof other, "/tmp/fai_tuning_other_%ld", (long)getpid());
    FILE *f = fopen(other, "w");
    REQUIRE(f != NULL);
    fputs("someone's notes\n", f);
    fclose(f);
    setenv("FAI_TUNE_CACHE", other, 1);
    fai_tuning_reload();
    CHECK(fai_tuning_store(plan, 8, 8) == FAI_ERR_IO);
    CHECK(strstr(fai_last_error(), other) != NULL && strstr(fai_last_error(), "not replaced"));
    const char *text = read_file(other);
    CHECK(text && strcmp(text, "someone's notes\n") == 0);
    remove(other);
    /* a path longer than the cache takes: named with its variable, not called disabled */
    static char long_path[2100];
    memset(long_path, 'a', sizeof long_path - 1);
    long_path[0] = '/';
    setenv("FAI_TUNE_CACHE", long_path, 1);
    CHECK(fai_tuning_path()[0] == '\0');
    CHECK(fai_tuning_store(plan, 8, 8) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "FAI_TUNE_CACHE") != NULL);
    CHECK(strstr(fai_last_error(), "longer than") != NULL);
    setenv("FAI_TUNE_CACHE", "off", 1);
    fai_tuning_reload();
    fai_plan_free(plan);
}

TEST(tuning_store_writes_through_a_symlink) {
    char path[512], link[560];
    use_cache_file(path, sizeof path);
    fai_problem pb;
    prefill_problem(&pb);
    fai_plan *plan;
    REQUIRE(fai_plan_create(&pb, &plan) == FAI_OK);
    CHECK(fai_tuning_store(plan, 4, 16) == FAI_OK);
    snprintf(link, sizeof link, "%s.link", path);
    REQUIRE(symlink(path, link) == 0);
    setenv("FAI_TUNE_CACHE", link, 1);
    CHECK(fai_tuning_store(plan, 8, 32) == FAI_OK);
    struct stat st;
    CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode)); /* the link stays a link */
    const char *text = read_file(path);
    REQUIRE(text != NULL);
    CHECK(strstr(text, "\t8\t32\n") != NULL && strstr(text, "\t4\t16\n") == NULL);
    fai_plan_info info;
    REQUIRE(plan_tile(&pb, &info));
    CHECK(strcmp(info.tile_source, "tuned") == 0 && info.tile_q == 8 && info.tile_kv == 32);
    /* a link to nowhere: refused, its target not made */
    remove(path);
    CHECK(fai_tuning_store(plan, 8, 32) == FAI_ERR_IO);
    CHECK(strstr(fai_last_error(), "dangling") != NULL);
    CHECK(access(path, F_OK) != 0);
    remove(link);
    fai_plan_free(plan);
    drop_cache_file(path);
}

/* Two processes storing at once: each store reads the file, adds its entry and renames a new
 * file over it; without the lock between them one's entries would be lost. */
TEST(tuning_concurrent_stores_all_land) {
    enum { PER_CHILD = 12 };
    char path[512];
    use_cache_file(path, sizeof path);
    fai_plan *plans[2 * PER_CHILD];
    fai_problem pb;
    prefill_problem(&pb);
    for (int i = 0; i < 2 * PER_CHILD; i++) { /* one shape class each: head dims 8, 16, ... */
        pb.head_dim = 8 * (i + 1);
        REQUIRE(fai_plan_create(&pb, &plans[i]) == FAI_OK);
    }
    pid_t children[2];
    for (int c = 0; c < 2; c++) {
        children[c] = fork();
        REQUIRE(children[c] >= 0);
        if (children[c] == 0) {
            int failures = 0;
            for (int i = 0; i < PER_CHILD; i++)
                failures += fai_tuning_store(plans[c * PER_CHILD + i], 4, 16) != FAI_OK;
            _exit(failures ? 1 : 0);
        }
    }
    for (int c = 0; c < 2; c++) {
        int status = 0;
        CHECK(waitpid(children[c], &status, 0) == children[c]);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    fai_tuning_reload();
    int tuned = 0;
    for (int i = 0; i < 2 * PER_CHILD; i++) {
        pb.head_dim = 8 * (i + 1);
        fai_plan_info info;
        REQUIRE(plan_tile(&pb, &info));
        tuned += strcmp(info.tile_source, "tuned") == 0;
        fai_plan_free(plans[i]);
    }
    CHECK(tuned == 2 * PER_CHILD);
    drop_cache_file(path);
}

/* A line the 1 MiB read limit cuts is no entry (its last number would be cut short): the plan
 * does not take it, and a store does not write it back. The same line a byte earlier is read. */
TEST(tuning_line_cut_by_the_read_limit_is_ignored) {
    char path[512];
    use_cache_file(path, sizeof path);
    fai_problem pb;
    prefill_problem(&pb);
    fai_plan *plan;
    REQUIRE(fai_plan_create(&pb, &plan) == FAI_OK);
    REQUIRE(fai_tuning_store(plan, 4, 16) == FAI_OK);
    const char *text = read_file(path);
    REQUIRE(text != NULL);
    const char *entry = strchr(text, '\n') + 1; /* after the header: "key\t4\t16\n" */
    char key[400];
    const size_t key_length = (size_t)(strstr(entry, "\t4\t16\n") - entry);
    REQUIRE(key_length < sizeof key);
    memcpy(key, entry, key_length);
    key[key_length] = '\0';
    char header[200];
    snprintf(header, sizeof header, "%.*s", (int)(strchr(text, '\n') - text + 1), text);
    const long limit = 1L << 20;
    /* the entry "key\t16\t32\n" with its last 0, 1 or 3 bytes past the limit: whole (its
     * newline the limit's last byte, or just past it) or cut after "key\t16\t3" */
    static const long past_limit[] = {0, 1, 3};
    for (int v = 0; v < 3; v++) {
        const long before = limit - (long)(key_length + strlen("\t16\t32\n")) + past_limit[v];
        FILE *f = fopen(path, "w");
        REQUIRE(f != NULL);
        long written = fputs(header, f) >= 0 ? (long)strlen(header) : 0;
        while (written < before) { /* comment lines (or empty ones), which do not parse */
            const long n = before - written > 100 ? 100 : before - written; /* with its newline */
            for (long i = 0; i < n - 1; i++)
                fputc(i ? 'x' : '#', f);
            fputc('\n', f);
            written += n;
        }
        REQUIRE(written == before);
        fprintf(f, "%s\t16\t32\n", key);
        fclose(f);
        fai_tuning_reload();
        fai_plan_info info;
        REQUIRE(plan_tile(&pb, &info));
        if (past_limit[v] < 3)
            CHECK(strcmp(info.tile_source, "tuned") == 0 && info.tile_q == 16 &&
                  info.tile_kv == 32);
        else
            CHECK(strcmp(info.tile_source, "heuristic") == 0);
    }
    /* a store of another class, over the cut file, keeps no cut entry */
    fai_problem other = pb;
    other.head_dim = 32;
    fai_plan *other_plan;
    REQUIRE(fai_plan_create(&other, &other_plan) == FAI_OK);
    CHECK(fai_tuning_store(other_plan, 8, 8) == FAI_OK);
    text = read_file(path);
    CHECK(text && strstr(text, "\t16\t3\n") == NULL);
    fai_plan_free(other_plan);
    fai_plan_free(plan);
    drop_cache_file(path);
}

/* The file is anyone's to edit: a tile past the L2 budget `fai tune` measures within (here a
 * 4096 x 4096 prefill tile, gigabytes of workspace) is not taken; one within it is. */
TEST(tuning_tile_past_the_l2_budget_is_ignored) {
    char path[512];
    use_cache_file(path, sizeof path);
    fai_problem pb;
    prefill_problem(&pb);
    pb.seq_q = pb.seq_kv = 4096;
    fai_plan *plan;
    REQUIRE(fai_plan_create(&pb, &plan) == FAI_OK);
    fai_plan_info info;
    REQUIRE(fai_tuning_store(plan, 4096, 4096) == FAI_OK);
    REQUIRE(plan_tile(&pb, &info));
    CHECK(strcmp(info.tile_source, "heuristic") == 0 && info.tile_q < 4096);
    CHECK(info.tile_fits);
    REQUIRE(fai_tuning_store(plan, 16, 32) == FAI_OK);
    REQUIRE(plan_tile(&pb, &info));
    CHECK(strcmp(info.tile_source, "tuned") == 0 && info.tile_q == 16 && info.tile_kv == 32);
    fai_plan_free(plan);
    drop_cache_file(path);
}

/* A tuned tile is taken exactly when `fai tune` would have measured it: its slot within half of
 * L2 (the matrix engine's own slot on plans it runs, a decode tile's rows within a quarter), as
 * the plan reports for that tile given as the problem's own. Several tiles of an f16 prefill,
 * on whichever table runs the suite (the matrix engine's slot is larger than the vector
 * tables' slice for the same tile). */
TEST(tuning_tile_taken_as_fai_tune_measures) {
    char path[512];
    use_cache_file(path, sizeof path);
    fai_problem pb;
    prefill_problem(&pb);
    pb.seq_q = pb.seq_kv = 4096, pb.head_dim = 128;
    pb.q_dtype = pb.k_dtype = pb.v_dtype = pb.o_dtype = FAI_DTYPE_F16;
    static const int64_t tiles[][2] = {{32, 128}, {16, 256}, {64, 64}, {16, 32}, {8, 128}};
    int taken = 0;
    for (size_t i = 0; i < sizeof tiles / sizeof tiles[0]; i++) {
        fai_problem own = pb;
        own.tile_q = tiles[i][0], own.tile_kv = tiles[i][1];
        fai_plan_info info;
        REQUIRE(plan_tile(&own, &info));
        const int measured =
            info.tile_fits || (info.l1d_bytes > 0 && info.l2_bytes <= info.l2_capacity / 2);
        fai_plan *plan;
        REQUIRE(fai_plan_create(&pb, &plan) == FAI_OK);
        REQUIRE(fai_tuning_store(plan, tiles[i][0], tiles[i][1]) == FAI_OK);
        fai_plan_free(plan);
        REQUIRE(plan_tile(&pb, &info));
        const int tuned = strcmp(info.tile_source, "tuned") == 0;
        CHECK(tuned == measured);
        if (tuned) CHECK(info.tile_q == tiles[i][0] && info.tile_kv == tiles[i][1]);
        taken += tuned;
    }
    CHECK(taken > 0); /* 16 x 32 fits any L2 this runs on */
    drop_cache_file(path);
}

/* What a store would refuse is said before anything is written (fai_tuning_check_store, which
 * `fai tune` calls before it measures), and a store refuses it alike, leaving the path as it
 * was: a name ending in '/', a read-only file (for a user the permissions bind), a directory, a
 * file fai did not write, a disabled cache. A file that does not exist yet, in directories that
 * do not either, passes and is not made by the check. */
TEST(tuning_store_checks_before_it_writes) {
    fai_problem pb;
    prefill_problem(&pb);
    fai_plan *plan;
    REQUIRE(fai_plan_create(&pb, &plan) == FAI_OK);
    char base[256], path[320];
    snprintf(base, sizeof base, "/tmp/fai_tuning_check_%ld", (long)getpid());
    struct stat st;
    /* absent, with its directories: fine, and nothing made */
    snprintf(path, sizeof path, "%s/sub/tiles.tsv", base);
    setenv("FAI_TUNE_CACHE", path, 1);
    CHECK(fai_tuning_check_store() == FAI_OK);
    CHECK(stat(base, &st) != 0);
    /* a directory's name */
    snprintf(path, sizeof path, "%s/tiles.tsv/", base);
    setenv("FAI_TUNE_CACHE", path, 1);
    CHECK(fai_tuning_check_store() == FAI_ERR_IO);
    CHECK(strstr(fai_last_error(), "names a directory") != NULL);
    CHECK(fai_tuning_store(plan, 8, 8) == FAI_ERR_IO);
    CHECK(stat(base, &st) != 0); /* nothing made on the way */
    /* a directory at the path */
    REQUIRE(mkdir(base, 0700) == 0);
    setenv("FAI_TUNE_CACHE", base, 1);
    CHECK(fai_tuning_check_store() == FAI_ERR_IO);
    CHECK(strstr(fai_last_error(), "not a regular file") != NULL);
    rmdir(base);
    /* a file fai did not write */
    FILE *f = fopen(base, "w");
    REQUIRE(f != NULL);
    fputs("notes\n", f);
    fclose(f);
    CHECK(fai_tuning_check_store() == FAI_ERR_IO);
    CHECK(strstr(fai_last_error(), "not replaced") != NULL);
    remove(base);
    /* a file of fai's, made read-only by its owner: left as it was */
    setenv("FAI_TUNE_CACHE", base, 1);
    REQUIRE(fai_tuning_store(plan, 4, 16) == FAI_OK);
    CHECK(fai_tuning_check_store() == FAI_OK);
    REQUIRE(chmod(base, 0444) == 0);
    if (geteuid() != 0) { /* root writes whatever the permissions say */
        CHECK(fai_tuning_check_store() == FAI_ERR_IO);
        CHECK(strstr(fai_last_error(), "not writable") != NULL);
        CHECK(fai_tuning_store(plan, 8, 8) == FAI_ERR_IO);
        const char *text = read_file(base);
        CHECK(text && strstr(text, "\t4\t16\n") && !strstr(text, "\t8\t8\n"));
    }
    chmod(base, 0644);
    remove(base);
    char lock[300];
    snprintf(lock, sizeof lock, "%s.lock", base);
    remove(lock);
    setenv("FAI_TUNE_CACHE", "off", 1);
    CHECK(fai_tuning_check_store() == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "disabled") != NULL);
    fai_tuning_reload();
    fai_plan_free(plan);
}
