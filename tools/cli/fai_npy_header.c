/* The .npy header's dict literal: a small scanner that never looks past the header's declared
 * end (fai_npy_header.h). */
#include "fai_npy_header.h"

#include <string.h>

/* -- header scanner ---------------------------------------------------------------------------- */

typedef struct scanner {
    const char *p, *end;
} scanner;

static void skip_space(scanner *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

/* A quoted Python string without escapes; str and len point into the header. */
static int scan_string(scanner *s, const char **str, size_t *len, char *err, size_t errlen) {
    const char quote = *s->p;
    const char *start = ++s->p;
    while (s->p < s->end && *s->p != quote) {
        if (*s->p == '\\')
            return ft_npy_fail(err, errlen, "header: escaped strings are not supported");
        s->p++;
    }
    if (s->p >= s->end) return ft_npy_fail(err, errlen, "header: unterminated string");
    *str = start;
    *len = (size_t)(s->p - start);
    s->p++;
    return 0;
}

static int scan_word(scanner *s, const char *word) {
    const size_t n = strlen(word);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0) return 0;
    const char *after = s->p + n;
    if (after < s->end && ((*after >= 'a' && *after <= 'z') || (*after >= 'A' && *after <= 'Z') ||
                           (*after >= '0' && *after <= '9') || *after == '_'))
        return 0;
    s->p = after;
    return 1;
}

static int is_little_endian(void) {
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

static int parse_descr(const char *str, size_t len, ft_npy_header *h, char *err, size_t errlen) {
    char shown[SHOWN_CHARS + 1];
    ft_npy_show(shown, sizeof shown, str, len);
    char order = '\0';
    const char *code = str;
    size_t clen = len;
    if (clen && (code[0] == '<' || code[0] == '>' || code[0] == '|' || code[0] == '=')) {
        order = code[0];
        code++;
        clen--;
    }
    static const struct {
        const char *code;
        ft_npy_dtype dtype;
    } known[] = {{"f4", FT_NPY_F32}, {"f2", FT_NPY_F16}, {"u2", FT_NPY_U16}, {"b1", FT_NPY_BOOL},
                 {"u1", FT_NPY_U8},  {"i4", FT_NPY_I32}, {"i1", FT_NPY_I8}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        if (clen != 2 || memcmp(code, known[i].code, 2) != 0) continue;
        const ft_npy_dtype dt = known[i].dtype;
        if (ft_npy_dtype_size(dt) > 1) {
            if (order == '>' || ((order == '=' || order == '\0') && !is_little_endian()))
                return ft_npy_fail(
                    err, errlen,
                    "dtype '%s' is big-endian; only little-endian arrays are supported", shown);
            if (order == '|')
                return ft_npy_fail(err, errlen, "dtype '%s' has no byte order", shown);
        }
        h->dtype = dt;
        return 0;
    }
    if (clen >= 1 && code[0] == 'O')
        return ft_npy_fail(
            err, errlen, "dtype '%s' is an object array; only numeric arrays are supported", shown);
    return ft_npy_fail(
        err, errlen,
        "unsupported dtype '%s' (expected float32 '<f4', float16 '<f2', uint16 '<u2', "
        "bool '|b1', uint8 '|u1', int8 '|i1' or int32 '<i4')",
        shown);
}

/* The tuple after 'shape': '(' [int {',' int}] [','] ')'. Ints may carry Python 2's 'L'. */
static int parse_shape(scanner *s, ft_npy_header *h, char *err, size_t errlen) {
    const char *start = s->p;
    if (s->p >= s->end || *s->p != '(')
        return ft_npy_fail(err, errlen, "header: 'shape' is not a tuple");
    s->p++;
    h->rank = 0;
    int dims = 0;
    for (;;) {
        skip_space(s);
        if (s->p >= s->end) return ft_npy_fail(err, errlen, "header: unterminated 'shape' tuple");
        if (*s->p == ')') {
            s->p++;
            break;
        }
        int neg = 0;
        if (*s->p == '-' || *s->p == '+') {
            neg = *s->p == '-';
            s->p++;
        }
        const char *digits = s->p;
        uint64_t v = 0;
        int overflow = 0;
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
            const unsigned d = (unsigned)(*s->p - '0');
            if (v > ((uint64_t)INT64_MAX - d) / 10) overflow = 1;
            if (!overflow) v = v * 10 + d;
            s->p++;
        }
        if (s->p == digits) {
            char shown[SHOWN_CHARS + 1];
            ft_npy_show(shown, sizeof shown, start, ft_npy_trimmed(start, s->end));
            return ft_npy_fail(err, errlen, "header: 'shape' %s is not a tuple of integers", shown);
        }
        if (overflow) {
            char shown[SHOWN_CHARS + 1];
            ft_npy_show(shown, sizeof shown, digits - neg, (size_t)(s->p - digits) + (size_t)neg);
            return ft_npy_fail(err, errlen, "shape dimension %s does not fit in 64 bits", shown);
        }
        if (s->p < s->end && (*s->p == 'L' || *s->p == 'l')) s->p++;
        if (dims >= FT_NPY_MAX_RANK) {
            /* count the remaining dimensions for the message, without storing them */
            dims++;
        } else {
            h->shape[dims++] = neg ? -(int64_t)v : (int64_t)v;
        }
        if (neg && v) h->negative = 1;
        skip_space(s);
        if (s->p >= s->end) return ft_npy_fail(err, errlen, "header: unterminated 'shape' tuple");
        if (*s->p == ',') {
            s->p++;
        } else if (*s->p != ')') {
            char shown[SHOWN_CHARS + 1];
            ft_npy_show(shown, sizeof shown, start, ft_npy_trimmed(start, s->end));
            return ft_npy_fail(err, errlen, "header: 'shape' %s is not a tuple of integers", shown);
        }
    }
    if (dims > FT_NPY_MAX_RANK)
        return ft_npy_fail(err, errlen, "shape has rank %d; at most %d dimensions are supported",
                           dims, FT_NPY_MAX_RANK);
    h->rank = dims;
    return 0;
}

enum { KEY_DESCR = 1, KEY_FORTRAN = 2, KEY_SHAPE = 4 };

int ft_npy_parse_dict(const char *text, size_t len, ft_npy_header *h, char *err, size_t errlen) {
    scanner s = {text, text + len};
    int seen = 0;
    skip_space(&s);
    if (s.p >= s.end || *s.p != '{') {
        char shown[SHOWN_CHARS + 1];
        ft_npy_show(shown, sizeof shown, text, ft_npy_trimmed(text, text + len));
        return ft_npy_fail(err, errlen, "header is not a dict: '%s'", shown);
    }
    s.p++;
    for (;;) {
        skip_space(&s);
        if (s.p >= s.end) return ft_npy_fail(err, errlen, "header: unterminated dict");
        if (*s.p == '}') {
            s.p++;
            break;
        }
        if (*s.p != '\'' && *s.p != '"') {
            char shown[SHOWN_CHARS + 1];
            ft_npy_show(shown, sizeof shown, s.p, ft_npy_trimmed(s.p, s.end));
            return ft_npy_fail(err, errlen, "header: expected a quoted key at '%s'", shown);
        }
        const char *key = NULL;
        size_t klen = 0;
        if (scan_string(&s, &key, &klen, err, errlen)) return -1;
        int which = 0;
        if (klen == 5 && !memcmp(key, "descr", 5))
            which = KEY_DESCR;
        else if (klen == 13 && !memcmp(key, "fortran_order", 13))
            which = KEY_FORTRAN;
        else if (klen == 5 && !memcmp(key, "shape", 5))
            which = KEY_SHAPE;
        char kshown[SHOWN_CHARS + 1];
        ft_npy_show(kshown, sizeof kshown, key, klen);
        if (!which) return ft_npy_fail(err, errlen, "header: unknown key '%s'", kshown);
        if (seen & which) return ft_npy_fail(err, errlen, "header: key '%s' appears twice", kshown);
        seen |= which;
        skip_space(&s);
        if (s.p >= s.end || *s.p != ':')
            return ft_npy_fail(err, errlen, "header: expected ':' after '%s'", kshown);
        s.p++;
        skip_space(&s);
        if (s.p >= s.end) return ft_npy_fail(err, errlen, "header: '%s' has no value", kshown);
        if (which == KEY_DESCR) {
            if (*s.p == '[')
                return ft_npy_fail(err, errlen,
                                   "structured dtypes are not supported ('descr' is a list)");
            if (*s.p != '\'' && *s.p != '"')
                return ft_npy_fail(err, errlen, "header: 'descr' is not a string");
            const char *str = NULL;
            size_t slen = 0;
            if (scan_string(&s, &str, &slen, err, errlen)) return -1;
            if (parse_descr(str, slen, h, err, errlen)) return -1;
        } else if (which == KEY_FORTRAN) {
            if (scan_word(&s, "True"))
                return ft_npy_fail(
                    err, errlen, "Fortran-order arrays are not supported (fortran_order is True)");
            if (!scan_word(&s, "False"))
                return ft_npy_fail(err, errlen, "header: 'fortran_order' is not True or False");
        } else {
            if (parse_shape(&s, h, err, errlen)) return -1;
        }
        skip_space(&s);
        if (s.p >= s.end) return ft_npy_fail(err, errlen, "header: unterminated dict");
        if (*s.p == ',') {
            s.p++;
        } else if (*s.p != '}') {
            char shown[SHOWN_CHARS + 1];
            ft_npy_show(shown, sizeof shown, s.p, ft_npy_trimmed(s.p, s.end));
            return ft_npy_fail(err, errlen, "header: expected ',' or '}' at '%s'", shown);
        }
    }
    /* padding: spaces and the final newline (some writers pad with NUL bytes) */
    while (s.p < s.end &&
           (*s.p == ' ' || *s.p == '\t' || *s.p == '\n' || *s.p == '\r' || *s.p == '\0'))
        s.p++;
    if (s.p < s.end) {
        char shown[SHOWN_CHARS + 1];
        ft_npy_show(shown, sizeof shown, s.p, ft_npy_trimmed(s.p, s.end));
        return ft_npy_fail(err, errlen, "header: unexpected text after the dict: '%s'", shown);
    }
    if (!(seen & KEY_DESCR)) return ft_npy_fail(err, errlen, "header has no 'descr'");
    if (!(seen & KEY_FORTRAN)) return ft_npy_fail(err, errlen, "header has no 'fortran_order'");
    if (!(seen & KEY_SHAPE)) return ft_npy_fail(err, errlen, "header has no 'shape'");
    return 0;
}

/* Validates a whole file image: preamble, header, shape and payload length. */
