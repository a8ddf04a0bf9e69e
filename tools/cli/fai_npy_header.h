/* What the .npy reader (fai_npy.c), its header dict parser (fai_npy_header.c) and the writer
 * (fai_npy_write.c) share: the magic, the alignment, the parsed header and the message helpers.
 * Not for their users. */
#ifndef FAI_NPY_HEADER_H
#define FAI_NPY_HEADER_H

#include "fai_npy.h"

#include <stddef.h>
#include <stdint.h>

#define NPY_ALIGN 64
#define SHOWN_PATH 400 /* longest file name quoted in a message */
#define SHOWN_CHARS 40 /* longest piece of header text quoted in a message */

typedef struct ft_npy_header {
    ft_npy_dtype dtype;
    int rank;
    int64_t shape[FT_NPY_MAX_RANK];
    int negative;       /* some dimension is negative */
    size_t data_offset; /* where the payload starts */
    size_t count, nbytes;
} ft_npy_header;

/* "\x93NUMPY", the first bytes of every .npy file. */
extern const unsigned char ft_npy_magic[6];

/* Writes a message into err (when given) and returns -1. */
int ft_npy_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Copies untrusted bytes into a message: printable ASCII only (others become '?'), cut with
 * "..." to fit dst. */
void ft_npy_show(char *dst, size_t dstlen, const char *src, size_t n);

/* Length of [p, end) without the trailing padding, for quoting the rest of a header. */
size_t ft_npy_trimmed(const char *p, const char *end);

/* The header's dict literal text[0, len): descr, fortran_order and shape into *h (dtype, rank,
 * shape, negative). 0, or -1 with a message in err. */
int ft_npy_parse_dict(const char *text, size_t len, ft_npy_header *h, char *err, size_t errlen);

#endif
