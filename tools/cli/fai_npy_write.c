/* .npy writer (fai_npy.h): a file written whole under a temporary name, then renamed. */
/* realpath is POSIX.1-2008 with XSI */
#define _XOPEN_SOURCE 700
#include "fai_npy.h"
#include "fai_npy_header.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

static int write_full(int fd, const void *data, size_t n) {
    const unsigned char *p = data;
    while (n) {
        const ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The file an output path names: the path itself, or the file its symbolic link leads to (the
 * link is written through, as a shell's redirection does). Refused: a link that leads nowhere,
 * and a target that exists and is not a regular file (a device, FIFO, socket or directory, which
 * replacing with a file would destroy). *mode gets the target's permission bits when it exists
 * (its replacement keeps them), else -1. */
static int output_target(const char *path, const char *where, char *target, size_t target_len,
                         int *mode, char *err, size_t errlen) {
    struct stat st;
    *mode = -1;
    if (lstat(path, &st) != 0) {
        if (snprintf(target, target_len, "%s", path) >= (int)target_len)
            return ft_npy_fail(err, errlen, "%s: path too long", where);
        return 0; /* a new file */
    }
    if (S_ISLNK(st.st_mode)) {
        char resolved[PATH_MAX];
        if (!realpath(path, resolved) || stat(resolved, &st) != 0)
            return ft_npy_fail(err, errlen, "%s: a symbolic link to a missing file: not replaced",
                               where);
        if (snprintf(target, target_len, "%s", resolved) >= (int)target_len)
            return ft_npy_fail(err, errlen, "%s: path too long", where);
    } else if (snprintf(target, target_len, "%s", path) >= (int)target_len) {
        return ft_npy_fail(err, errlen, "%s: path too long", where);
    }
    if (S_ISDIR(st.st_mode)) return ft_npy_fail(err, errlen, "%s: is a directory", where);
    if (!S_ISREG(st.st_mode))
        return ft_npy_fail(err, errlen,
                           "%s: exists and is not a regular file (a device, FIFO or socket): "
                           "not replaced",
                           where);
    *mode = (int)(st.st_mode & 07777);
    return 0;
}

/* Whether a commit could rename a new file over `target`: the directory must let the user make
 * a file in it, and in a sticky directory (such as /tmp) only the owner of a file, the owner of
 * the directory or root may replace the file. Caught here, before anything is computed, rather
 * than by a rename that fails after another output has been put in place. */
static int check_replaceable(const char *target, int exists, const char *where, char *err,
                             size_t errlen) {
    char copy[PATH_MAX];
    if (snprintf(copy, sizeof copy, "%s", target) >= (int)sizeof copy)
        return ft_npy_fail(err, errlen, "%s: path too long", where);
    const char *dir = dirname(copy);
    if (faccessat(AT_FDCWD, dir, W_OK | X_OK, AT_EACCESS) != 0)
        return ft_npy_fail(err, errlen, "%s: cannot create a file in its directory: %s", where,
                           strerror(errno));
    const uid_t user = geteuid();
    struct stat dir_st, file_st;
    if (!exists || user == 0 || stat(dir, &dir_st) != 0 || lstat(target, &file_st) != 0)
        return 0; /* nothing to replace, or root, or gone: the rename will tell */
    if ((dir_st.st_mode & S_ISVTX) && file_st.st_uid != user && dir_st.st_uid != user)
        return ft_npy_fail(err, errlen,
                           "%s: belongs to another user (uid %u) in a sticky directory, where "
                           "only its owner may replace it",
                           where, (unsigned)file_st.st_uid);
    return 0;
}

int ft_npy_check_output(const char *path, char *err, size_t errlen) {
    char where[SHOWN_PATH + 1], target[PATH_MAX];
    ft_npy_show(where, sizeof where, path, strlen(path));
    int mode;
    if (output_target(path, where, target, sizeof target, &mode, err, errlen)) return -1;
    return check_replaceable(target, mode >= 0, where, err, errlen);
}

/* The template "<target's dir>/.fai-XXXXXX" of a file beside target, for mkstemp (short, so that
 * a target whose name is as long as the file system allows still gets one). 0, or -1 when it
 * does not fit in len bytes. */
static int temp_template_beside(const char *target, char *out, size_t len) {
    static const char temp_name[] = ".fai-XXXXXX";
    const char *slash = strrchr(target, '/');
    const size_t dirlen = slash ? (size_t)(slash - target) + 1 : 0;
    if (!out || len < dirlen + sizeof temp_name) return -1;
    memcpy(out, target, dirlen);
    memcpy(out + dirlen, temp_name, sizeof temp_name);
    return 0;
}

int ft_npy_write_temp(const char *path, ft_npy_dtype dtype, int rank, const int64_t *shape,
                      const void *data, char *tmp_path, size_t tmp_len, char *err, size_t errlen) {
    char where[SHOWN_PATH + 1];
    ft_npy_show(where, sizeof where, path ? path : "", path ? strlen(path) : 0);
    if (tmp_path && tmp_len) tmp_path[0] = '\0';
    if (!path || !*path) return ft_npy_fail(err, errlen, "no output file name");
    if (rank < 0 || rank > FT_NPY_MAX_RANK || (rank && !shape))
        return ft_npy_fail(err, errlen, "%s: rank %d is out of range", where, rank);
    const size_t esize = ft_npy_dtype_size(dtype);
    if (!esize) return ft_npy_fail(err, errlen, "%s: unknown dtype %d", where, (int)dtype);
    char shape_text[FT_NPY_MAX_RANK * 22 + 8];
    ft_npy_format_shape(shape_text, sizeof shape_text, rank, shape);
    uint64_t count = 1;
    int zero = 0;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 0)
            return ft_npy_fail(err, errlen, "%s: dimension %d of shape %s is negative", where, i,
                               shape_text);
        if (shape[i] == 0) {
            zero = 1;
            continue;
        }
        if (count > (uint64_t)INT64_MAX / (uint64_t)shape[i])
            return ft_npy_fail(err, errlen, "%s: shape %s holds more than 2^63 elements", where,
                               shape_text);
        count *= (uint64_t)shape[i];
    }
    if (count > SIZE_MAX / esize)
        return ft_npy_fail(err, errlen,
                           "%s: shape %s of %zu-byte elements is past the address space", where,
                           shape_text, esize);
    const size_t nbytes = zero ? 0 : (size_t)count * esize;
    if (nbytes && !data) return ft_npy_fail(err, errlen, "%s: no data", where);

    /* header: the dict as numpy writes it, padded so the payload starts on a 64-byte boundary */
    char hdr[512];
    int n = snprintf(hdr + 10, sizeof hdr - 10,
                     "{'descr': '%s', 'fortran_order': False, "
                     "'shape': %s, }",
                     ft_npy_dtype_descr(dtype), shape_text);
    if (n < 0 || (size_t)n + 10 + 1 + NPY_ALIGN > sizeof hdr)
        return ft_npy_fail(err, errlen, "%s: header too long", where);
    size_t total = 10 + (size_t)n + 1;
    total = (total + NPY_ALIGN - 1) / NPY_ALIGN * NPY_ALIGN;
    memset(hdr + 10 + n, ' ', total - 10 - (size_t)n);
    hdr[total - 1] = '\n';
    memcpy(hdr, ft_npy_magic, 6);
    hdr[6] = 1;
    hdr[7] = 0;
    hdr[8] = (char)((total - 10) & 0xff);
    hdr[9] = (char)((total - 10) >> 8);

    /* a temporary file beside the target */
    const char *slash = strrchr(path, '/');
    if (!*(slash ? slash + 1 : path))
        return ft_npy_fail(err, errlen, "%s: names a directory, not a file", where);
    char target[PATH_MAX];
    int mode;
    if (output_target(path, where, target, sizeof target, &mode, err, errlen)) return -1;
    if (temp_template_beside(target, tmp_path, tmp_len))
        return ft_npy_fail(err, errlen, "%s: path too long", where);
    const int fd = mkstemp(tmp_path);
    if (fd < 0) {
        const int e = errno;
        tmp_path[0] = '\0';
        return ft_npy_fail(err, errlen, "%s: cannot create a file in its directory: %s", where,
                           strerror(e));
    }
    const mode_t mask = umask(0);
    umask(mask);
    int e = 0;
    if (fchmod(fd, mode >= 0 ? (mode_t)mode : (mode_t)0666 & ~mask) != 0) e = errno;
    if (!e && write_full(fd, hdr, total) != 0) e = errno;
    if (!e && nbytes && write_full(fd, data, nbytes) != 0) e = errno;
    if (close(fd) != 0 && !e) e = errno;
    if (e) {
        unlink(tmp_path);
        tmp_path[0] = '\0';
        return ft_npy_fail(err, errlen, "%s: cannot write: %s", where, strerror(e));
    }
    return 0;
}

int ft_npy_commit(const char *tmp_path, const char *path, char *err, size_t errlen) {
    char where[SHOWN_PATH + 1];
    ft_npy_show(where, sizeof where, path, strlen(path));
    char target[PATH_MAX];
    int mode;
    if (output_target(path, where, target, sizeof target, &mode, err, errlen)) {
        unlink(tmp_path);
        return -1;
    }
    if (rename(tmp_path, target) != 0) {
        const int e = errno;
        unlink(tmp_path);
        return ft_npy_fail(err, errlen, "%s: cannot replace: %s", where, strerror(e));
    }
    return 0;
}

int ft_npy_keep(const char *path, char *kept_path, size_t kept_len) {
    char where[SHOWN_PATH + 1], target[PATH_MAX], err[SHOWN_PATH + 64];
    ft_npy_show(where, sizeof where, path, strlen(path));
    if (kept_len) kept_path[0] = '\0';
    int mode;
    if (output_target(path, where, target, sizeof target, &mode, err, sizeof err)) return -1;
    if (mode < 0) return 0;
    /* mkstemp finds a free name; link wants it free again, and retries if another took it */
    for (int attempt = 0; attempt < 16; attempt++) {
        if (temp_template_beside(target, kept_path, kept_len)) return -1;
        const int fd = mkstemp(kept_path);
        if (fd < 0) break;
        close(fd);
        unlink(kept_path);
        if (link(target, kept_path) == 0) return 1;
        if (errno != EEXIST) break;
    }
    kept_path[0] = '\0';
    return -1;
}

int ft_npy_undo_commit(const char *path, const char *kept_path, int kept) {
    if (kept < 0) return -1;
    char where[SHOWN_PATH + 1], target[PATH_MAX], err[SHOWN_PATH + 64];
    ft_npy_show(where, sizeof where, path, strlen(path));
    int mode;
    if (output_target(path, where, target, sizeof target, &mode, err, sizeof err)) return -1;
    return kept ? rename(kept_path, target) : unlink(target);
}

void ft_npy_discard(const char *tmp_path) {
    if (tmp_path && *tmp_path) unlink(tmp_path);
}

int ft_npy_save(const char *path, ft_npy_dtype dtype, int rank, const int64_t *shape,
                const void *data, char *err, size_t errlen) {
    char tmp[4096];
    if (ft_npy_write_temp(path, dtype, rank, shape, data, tmp, sizeof tmp, err, errlen)) return -1;
    return ft_npy_commit(tmp, path, err, errlen);
}
