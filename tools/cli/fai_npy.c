/* .npy reader (the writer: fai_npy_write.c).
 *
 * A .npy file is: the magic "\x93NUMPY", a major and a minor version byte, the header length
 * (uint16 little-endian for 1.0, uint32 for 2.0 and 3.0), the header - a Python dict literal
 * with the keys 'descr', 'fortran_order' and 'shape', padded with spaces and ended by a newline -
 * and then the raw C-order payload. The header is parsed by a small scanner that never looks
 * past the header's declared end (fai_npy_header.c), which itself is checked against the buffer
 * length first. */
#include "fai_npy.h"
#include "fai_npy_header.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

const unsigned char ft_npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

size_t ft_npy_dtype_size(ft_npy_dtype dtype) {
    switch (dtype) {
    case FT_NPY_F32:
        return 4;
    case FT_NPY_F16:
        return 2;
    case FT_NPY_U16:
        return 2;
    case FT_NPY_BOOL:
        return 1;
    case FT_NPY_U8:
        return 1;
    case FT_NPY_I32:
        return 4;
    case FT_NPY_I8:
        return 1;
    }
    return 0;
}

const char *ft_npy_dtype_descr(ft_npy_dtype dtype) {
    switch (dtype) {
    case FT_NPY_F32:
        return "<f4";
    case FT_NPY_F16:
        return "<f2";
    case FT_NPY_U16:
        return "<u2";
    case FT_NPY_BOOL:
        return "|b1";
    case FT_NPY_U8:
        return "|u1";
    case FT_NPY_I32:
        return "<i4";
    case FT_NPY_I8:
        return "|i1";
    }
    return "?";
}

const char *ft_npy_dtype_name(ft_npy_dtype dtype) {
    switch (dtype) {
    case FT_NPY_F32:
        return "float32";
    case FT_NPY_F16:
        return "float16";
    case FT_NPY_U16:
        return "uint16";
    case FT_NPY_BOOL:
        return "bool";
    case FT_NPY_U8:
        return "uint8";
    case FT_NPY_I32:
        return "int32";
    case FT_NPY_I8:
        return "int8";
    }
    return "?";
}

/* -- messages ---------------------------------------------------------------------------------- */

int ft_npy_fail(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* Copies untrusted bytes into a message: printable ASCII only (others become '?'), cut with
 * "..." to fit dst. */
void ft_npy_show(char *dst, size_t dstlen, const char *src, size_t n) {
    if (dstlen < 4) {
        if (dstlen) dst[0] = '\0';
        return;
    }
    const size_t room = dstlen - 1;
    const size_t keep = n <= room ? n : room - 3;
    for (size_t i = 0; i < keep; i++) {
        const unsigned char c = (unsigned char)src[i];
        dst[i] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    size_t o = keep;
    if (keep < n)
        for (int k = 0; k < 3; k++)
            dst[o++] = '.';
    dst[o] = '\0';
}

/* Length of [p, end) without the trailing padding, for quoting the rest of a header. */
size_t ft_npy_trimmed(const char *p, const char *end) {
    while (end > p && (end[-1] == ' ' || end[-1] == '\n' || end[-1] == '\r' || end[-1] == '\t' ||
                       end[-1] == '\0'))
        end--;
    return (size_t)(end - p);
}

void ft_npy_format_shape(char *buf, size_t buflen, int rank, const int64_t *shape) {
    size_t o = 0;
    if (!buf || !buflen) return;
    buf[0] = '\0';
    int n = snprintf(buf, buflen, "(");
    if (n < 0) return;
    o = (size_t)n;
    for (int i = 0; i < rank && o < buflen; i++) {
        n = snprintf(buf + o, buflen - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
        if (n < 0) return;
        o += (size_t)n;
    }
    if (o < buflen) snprintf(buf + o, buflen - o, rank == 1 ? ",)" : ")");
}

static int parse_head(const unsigned char *buf, size_t len, ft_npy_header *h, char *err,
                      size_t errlen) {
    memset(h, 0, sizeof *h);
    if (len == 0) return ft_npy_fail(err, errlen, "empty file (0 bytes)");
    const size_t m = len < sizeof ft_npy_magic ? len : sizeof ft_npy_magic;
    if (memcmp(buf, ft_npy_magic, m) != 0)
        return ft_npy_fail(err, errlen, "not a .npy file (bad magic)");
    if (len < 8)
        return ft_npy_fail(err, errlen, "truncated file (%zu bytes) ends inside the preamble", len);
    const unsigned major = buf[6], minor = buf[7];
    if (!((major == 1 || major == 2 || major == 3) && minor == 0))
        return ft_npy_fail(err, errlen,
                           "unsupported .npy format version %u.%u (1.0, 2.0, 3.0 known)", major,
                           minor);
    const size_t pre = major == 1 ? 10 : 12;
    if (len < pre)
        return ft_npy_fail(err, errlen, "truncated file (%zu bytes) ends inside the preamble", len);
    size_t hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
    if (major != 1) hlen |= (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
    if (hlen > len - pre)
        return ft_npy_fail(err, errlen,
                           "truncated header: header length %zu runs past the end of the file (%zu "
                           "bytes)",
                           hlen, len);
    if (ft_npy_parse_dict((const char *)buf + pre, hlen, h, err, errlen)) return -1;

    char shape_text[FT_NPY_MAX_RANK * 22 + 8];
    ft_npy_format_shape(shape_text, sizeof shape_text, h->rank, h->shape);
    if (h->negative)
        return ft_npy_fail(err, errlen, "shape %s has a negative dimension", shape_text);
    /* the product of the nonzero dimensions must fit, so that no size derived from the shape
     * can overflow even when a zero makes the array empty */
    const size_t esize = ft_npy_dtype_size(h->dtype);
    uint64_t prod = 1;
    int zero = 0;
    for (int i = 0; i < h->rank; i++) {
        const uint64_t d = (uint64_t)h->shape[i];
        if (d == 0) {
            zero = 1;
            continue;
        }
        if (prod > (uint64_t)INT64_MAX / d)
            return ft_npy_fail(err, errlen, "shape %s has too many elements (the size overflows)",
                               shape_text);
        prod *= d;
    }
    if (prod > (uint64_t)INT64_MAX / esize || prod > (uint64_t)SIZE_MAX / esize)
        return ft_npy_fail(err, errlen, "shape %s has too many elements (the size overflows)",
                           shape_text);
    h->count = zero ? 0 : (size_t)prod;
    h->nbytes = h->count * esize;
    h->data_offset = pre + hlen;
    return 0;
}

/* Whether buf[0, len) holds the whole payload the header announces. */
static int check_payload(const ft_npy_header *h, size_t len, char *err, size_t errlen) {
    const size_t avail = len - h->data_offset;
    if (avail >= h->nbytes) return 0;
    char shape_text[FT_NPY_MAX_RANK * 22 + 8];
    ft_npy_format_shape(shape_text, sizeof shape_text, h->rank, h->shape);
    return ft_npy_fail(
        err, errlen,
        "truncated data: shape %s of %s needs %zu bytes after the header, the file has "
        "%zu",
        shape_text, ft_npy_dtype_name(h->dtype), h->nbytes, avail);
}

/* The end of the header as a preamble in buf[0, len) declares it, or 0 when buf does not hold a
 * preamble of a known version (parse_head then says why). */
static size_t declared_header_end(const unsigned char *buf, size_t len) {
    if (len < 10 || memcmp(buf, ft_npy_magic, sizeof ft_npy_magic) != 0 || buf[7] != 0) return 0;
    if (buf[6] == 1) return 10 + ((size_t)buf[8] | (size_t)buf[9] << 8);
    if ((buf[6] != 2 && buf[6] != 3) || len < 12) return 0;
    return 12 +
           ((size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24);
}

static void *alloc_aligned(size_t n) {
    size_t r = n ? n : 1;
    if (r > SIZE_MAX - (NPY_ALIGN - 1)) return NULL;
    r = (r + NPY_ALIGN - 1) / NPY_ALIGN * NPY_ALIGN;
    return aligned_alloc(NPY_ALIGN, r);
}

static void fill(ft_npy *out, const ft_npy_header *h) {
    out->dtype = h->dtype;
    out->rank = h->rank;
    for (int i = 0; i < h->rank; i++)
        out->shape[i] = h->shape[i];
    out->count = h->count;
    out->nbytes = h->nbytes;
}

int ft_npy_parse(const void *buf, size_t len, ft_npy *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (!buf && len) return ft_npy_fail(err, errlen, "no buffer");
    ft_npy_header h;
    if (parse_head((const unsigned char *)buf, len, &h, err, errlen) ||
        check_payload(&h, len, err, errlen))
        return -1;
    void *mem = alloc_aligned(h.nbytes);
    if (!mem) return ft_npy_fail(err, errlen, "out of memory for %zu bytes", h.nbytes);
    if (h.nbytes) memcpy(mem, (const unsigned char *)buf + h.data_offset, h.nbytes);
    fill(out, &h);
    out->buffer = mem;
    out->data = mem;
    return 0;
}

void ft_npy_free(ft_npy *array) {
    if (!array) return;
    free(array->buffer);
    memset(array, 0, sizeof *array);
}

/* -- files ------------------------------------------------------------------------------------- */

/* A growing, aligned read buffer. */
typedef struct reader {
    int fd;
    size_t hint; /* a regular file's size: the buffer may grow to it at once */
    unsigned char *buf;
    size_t cap, len;
    int error; /* errno of a failed read or allocation */
} reader;

/* Reads until the buffer holds `want` bytes or the file ends. The buffer grows to at most twice
 * what has arrived (or the file's size) and never past `want`, so a stream is read, and memory
 * taken, no further than the array it holds. Returns 0, or -1 with r->error set. */
static int fill_to(reader *r, size_t want) {
    while (r->len < want) {
        if (r->len == r->cap) {
            size_t cap = r->cap > SIZE_MAX / 2 ? SIZE_MAX : r->cap * 2;
            if (cap < 4096) cap = 4096;
            if (cap < r->hint) cap = r->hint;
            if (cap > want) cap = want;
            unsigned char *bigger = alloc_aligned(cap);
            if (!bigger) {
                r->error = ENOMEM;
                return -1;
            }
            if (r->len) memcpy(bigger, r->buf, r->len);
            free(r->buf);
            r->buf = bigger;
            r->cap = cap;
        }
        const ssize_t n = read(r->fd, r->buf + r->len, r->cap - r->len);
        if (n < 0) {
            if (errno == EINTR) continue;
            r->error = errno;
            return -1;
        }
        if (n == 0) break;
        r->len += (size_t)n;
    }
    return 0;
}

int ft_npy_load(const char *path, ft_npy *out, char *err, size_t errlen) {
    char where[SHOWN_PATH + 1];
    memset(out, 0, sizeof *out);
    ft_npy_show(where, sizeof where, path ? path : "", path ? strlen(path) : 0);
    if (!path) return ft_npy_fail(err, errlen, "no file name");
    const int fd = open(path, O_RDONLY);
    if (fd < 0) return ft_npy_fail(err, errlen, "%s: cannot open: %s", where, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        const int e = errno;
        close(fd);
        return ft_npy_fail(err, errlen, "%s: cannot stat: %s", where, strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return ft_npy_fail(err, errlen, "%s: is a directory", where);
    }
    /* the preamble, then the header it declares, then the payload the header declares: a pipe
     * or a device is read no further than one array, and one that holds none is refused after
     * its first bytes */
    reader r = {fd, S_ISREG(st.st_mode) && st.st_size > 0 ? (size_t)st.st_size : 0, NULL, 0, 0, 0};
    ft_npy_header h;
    int rc = fill_to(&r, 12);
    const size_t header_end = rc ? 0 : declared_header_end(r.buf, r.len);
    if (!rc && header_end) rc = fill_to(&r, header_end);
    if (!rc && header_end && !parse_head(r.buf, r.len, &h, NULL, 0))
        rc =
            fill_to(&r, h.nbytes <= SIZE_MAX - h.data_offset ? h.data_offset + h.nbytes : SIZE_MAX);
    close(fd);
    if (rc) {
        free(r.buf);
        return ft_npy_fail(err, errlen, "%s: cannot read: %s", where, strerror(r.error));
    }
    char why[512];
    if (parse_head(r.buf, r.len, &h, why, sizeof why) ||
        check_payload(&h, r.len, why, sizeof why)) {
        free(r.buf);
        return ft_npy_fail(err, errlen, "%s: %s", where, why);
    }
    unsigned char *buf = r.buf;
    /* keep the file's buffer; move the payload to its aligned start if the header's length is
     * not a multiple of the alignment (numpy's own files always are) */
    if (h.data_offset % NPY_ALIGN) memmove(buf, buf + h.data_offset, h.nbytes);
    fill(out, &h);
    out->buffer = buf;
    out->data = h.data_offset % NPY_ALIGN ? buf : buf + h.data_offset;
    return 0;
}
