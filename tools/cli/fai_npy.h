/* fai_npy.h - reading and writing NumPy .npy files for the `fai` tool.
 *
 * Reads format versions 1.0, 2.0 and 3.0 of little-endian, C-order arrays of the dtypes below;
 * writes version 1.0. Every rejection fills `err` with one line (no newline) that names what is
 * wrong, e.g. "shape (2, -1) has a negative dimension"; the file-level functions prefix it with
 * the path. No input, however malformed, makes the reader read outside the given bytes. */
#ifndef FAI_NPY_H
#define FAI_NPY_H

#include <stddef.h>
#include <stdint.h>

#define FT_NPY_MAX_RANK 8

typedef enum ft_npy_dtype {
    FT_NPY_F32 = 0, /* '<f4' */
    FT_NPY_F16,     /* '<f2' */
    FT_NPY_U16,     /* '<u2' (bfloat16 bits for the tool) */
    FT_NPY_BOOL,    /* '|b1' */
    FT_NPY_U8,      /* '|u1' (fp8 bits for the tool, with --k-dtype / --v-dtype) */
    FT_NPY_I32,     /* '<i4' */
    FT_NPY_I8       /* '|i1' */
} ft_npy_dtype;

/* One array. `data` points into `buffer`, is 64-byte aligned and is never NULL after a
 * successful parse, even for zero-size arrays. A rank-0 array has one element. */
typedef struct ft_npy {
    ft_npy_dtype dtype;
    int rank;
    int64_t shape[FT_NPY_MAX_RANK];
    size_t count;  /* number of elements: the product of shape */
    size_t nbytes; /* count * element size */
    void *data;
    void *buffer; /* the owned allocation; release with ft_npy_free */
} ft_npy;

/* Bytes per element, the descriptor ("<f4", ...) and a readable name ("float32", "float16",
 * "uint16", "bool", "uint8", "int32", "int8") of a dtype. */
size_t ft_npy_dtype_size(ft_npy_dtype dtype);
const char *ft_npy_dtype_descr(ft_npy_dtype dtype);
const char *ft_npy_dtype_name(ft_npy_dtype dtype);

/* Parses a whole .npy file held in buf[0, len) and copies its payload into a new buffer owned by
 * *out. Bytes after the payload are ignored. Returns 0 on success; on failure returns -1, leaves
 * *out empty (safe to free) and writes the reason to err (which may be NULL). */
int ft_npy_parse(const void *buf, size_t len, ft_npy *out, char *err, size_t errlen);

/* Reads the .npy file at path. Same contract as ft_npy_parse; errors read "PATH: reason". */
int ft_npy_load(const char *path, ft_npy *out, char *err, size_t errlen);

/* Releases the array's buffer and empties it. Safe on an empty or already freed array. */
void ft_npy_free(ft_npy *array);

/* Formats a shape as Python does: "()", "(3,)", "(2, 5, 3, 64)". Always NUL-terminates. */
void ft_npy_format_shape(char *buf, size_t buflen, int rank, const int64_t *shape);

/* Writes a version 1.0 file to a new temporary file in the directory of `path` and stores the
 * temporary file's name in tmp_path (a buffer of tmp_len bytes). Nothing is left behind on
 * failure. Finish with ft_npy_commit or ft_npy_discard. Returns 0 or -1. A symbolic link is
 * written through (the file it leads to is replaced, keeping its permissions); a path that
 * exists as anything but a regular file (a device, FIFO, socket or directory), or a link to
 * nothing, is refused. As with any replacement by rename, other hard links to the old file keep
 * its old contents. */
int ft_npy_write_temp(const char *path, ft_npy_dtype dtype, int rank, const int64_t *shape,
                      const void *data, char *tmp_path, size_t tmp_len, char *err, size_t errlen);

/* Whether ft_npy_write_temp would take `path` as an output (the rules above) and ft_npy_commit
 * could then replace it, before anything is computed: 0, or -1 with the reason in err. Also
 * refused: a directory the user cannot make a file in, and an existing file in a sticky directory
 * that belongs neither to the user nor to the directory's owner (unless the user is root). */
int ft_npy_check_output(const char *path, char *err, size_t errlen);

/* Renames the temporary file over path (atomic on POSIX file systems). On failure the temporary
 * file is removed and path is untouched. Returns 0 or -1. */
int ft_npy_commit(const char *tmp_path, const char *path, char *err, size_t errlen);

/* Keeps the file that path names (through a link: the file it leads to) under a second,
 * temporary name in its directory (a hard link), so that a commit over it can be undone. Returns
 * 1 with that name in kept_path, 0 when there is no file to keep, -1 when it could not be kept
 * (kept_path then ""). Finish with ft_npy_undo_commit or ft_npy_discard(kept_path). */
int ft_npy_keep(const char *path, char *kept_path, size_t kept_len);

/* Undoes ft_npy_commit over path, given what ft_npy_keep returned before it: puts the kept file
 * back (1), or removes the committed file when there was none before (0). Returns 0, or -1 when
 * nothing was kept or that failed. */
int ft_npy_undo_commit(const char *path, const char *kept_path, int kept);

/* Removes a temporary file made by ft_npy_write_temp or ft_npy_keep. */
void ft_npy_discard(const char *tmp_path);

/* write_temp + commit: path is either replaced whole or left untouched. Returns 0 or -1. */
int ft_npy_save(const char *path, ft_npy_dtype dtype, int rank, const int64_t *shape,
                const void *data, char *err, size_t errlen);

#endif
