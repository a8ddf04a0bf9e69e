/* Tests of the .npy reader and writer used by `fai run`: valid files of every version and dtype,
 * every kind of malformed input (each must be rejected with a message, never read out of
 * bounds), and writer round trips. */
#include "test_util.h"

#include "fai_npy.h"

#include <dirent.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Builds a .npy image: preamble of the given version, `dict` padded with spaces to a multiple
 * of 64 (or `pad_to` when nonzero) and ended with '\n', then `payload_len` payload bytes
 * counting 0, 1, 2, ... Returns the length; the image is in buf (static, reused). */
static unsigned char image[1 << 16];

static size_t make_npy(int major, const char *dict, size_t payload_len) {
    const size_t pre = major == 1 ? 10 : 12;
    const size_t dlen = strlen(dict);
    size_t total = pre + dlen + 1;
    total = (total + 63) / 64 * 64;
    memcpy(image, "\x93NUMPY", 6);
    image[6] = (unsigned char)major;
    image[7] = 0;
    const size_t hlen = total - pre;
    image[8] = (unsigned char)(hlen & 0xff);
    image[9] = (unsigned char)(hlen >> 8);
    if (major != 1) image[10] = image[11] = 0;
    memcpy(image + pre, dict, dlen);
    memset(image + pre + dlen, ' ', total - pre - dlen);
    image[total - 1] = '\n';
    for (size_t i = 0; i < payload_len; i++)
        image[total + i] = (unsigned char)i;
    return total + payload_len;
}

/* Parses the image and expects failure with a message containing `what`. */
static int rejects(const void *buf, size_t len, const char *what) {
    ft_npy a;
    char err[512];
    memset(err, 0, sizeof err);
    const int rc = ft_npy_parse(buf, len, &a, err, sizeof err);
    const int ok = rc == -1 && a.data == NULL && a.buffer == NULL && strstr(err, what) != NULL &&
                   strchr(err, '\n') == NULL && err[0] != '\0';
    if (!ok)
        fprintf(stderr, "  expected an error containing '%s', got rc %d: '%s'\n", what, rc, err);
    ft_npy_free(&a);
    return ok;
}

static int accepts(const void *buf, size_t len, ft_npy *a) {
    char err[512] = "";
    const int rc = ft_npy_parse(buf, len, a, err, sizeof err);
    if (rc) fprintf(stderr, "  unexpected error: %s\n", err);
    return rc == 0;
}

TEST(npy_parse_valid_f32_v1) {
    const size_t len =
        make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24);
    ft_npy a;
    REQUIRE(accepts(image, len, &a));
    CHECK(a.dtype == FT_NPY_F32);
    CHECK(a.rank == 2);
    CHECK(a.shape[0] == 2 && a.shape[1] == 3);
    CHECK(a.count == 6);
    CHECK(a.nbytes == 24);
    CHECK(a.data != NULL && ((uintptr_t)a.data % 64) == 0);
    CHECK(memcmp(a.data, image + len - 24, 24) == 0);
    ft_npy_free(&a);
    CHECK(a.data == NULL && a.buffer == NULL);
    ft_npy_free(&a); /* twice is harmless */
}

TEST(npy_parse_versions_2_and_3) {
    for (int major = 2; major <= 3; major++) {
        const size_t len =
            make_npy(major, "{'descr': '<i4', 'fortran_order': False, 'shape': (5,), }", 20);
        ft_npy a;
        REQUIRE(accepts(image, len, &a));
        CHECK(a.dtype == FT_NPY_I32 && a.rank == 1 && a.shape[0] == 5 && a.nbytes == 20);
        ft_npy_free(&a);
    }
}

TEST(npy_parse_large_v2_header) {
    /* a version 2.0 header longer than 65535 bytes (padding) */
    const char *dict = "{'descr': '<f2', 'fortran_order': False, 'shape': (3,), }";
    const size_t dlen = strlen(dict);
    const size_t hlen = 70000 - 12;
    static unsigned char big[70000 + 6];
    memcpy(big, "\x93NUMPY\x02\x00", 8);
    big[8] = (unsigned char)(hlen & 0xff);
    big[9] = (unsigned char)((hlen >> 8) & 0xff);
    big[10] = (unsigned char)((hlen >> 16) & 0xff);
    big[11] = 0;
    memcpy(big + 12, dict, dlen);
    memset(big + 12 + dlen, ' ', hlen - dlen);
    big[12 + hlen - 1] = '\n';
    memset(big + 70000, 0x3c, 6);
    ft_npy a;
    REQUIRE(accepts(big, sizeof big, &a));
    CHECK(a.dtype == FT_NPY_F16 && a.count == 3);
    CHECK(((const unsigned char *)a.data)[5] == 0x3c);
    ft_npy_free(&a);
}

TEST(npy_parse_all_dtypes) {
    static const struct {
        const char *descr;
        ft_npy_dtype dt;
        size_t size;
    } cases[] = {{"<f4", FT_NPY_F32, 4},  {"<f2", FT_NPY_F16, 2}, {"<u2", FT_NPY_U16, 2},
                 {"|b1", FT_NPY_BOOL, 1}, {"|u1", FT_NPY_U8, 1},  {"<i4", FT_NPY_I32, 4},
                 {"|i1", FT_NPY_I8, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dict[128];
        snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (4, 2), }",
                 cases[i].descr);
        const size_t len = make_npy(1, dict, 8 * cases[i].size);
        ft_npy a;
        REQUIRE(accepts(image, len, &a));
        CHECK(a.dtype == cases[i].dt);
        CHECK(a.nbytes == 8 * cases[i].size);
        CHECK(ft_npy_dtype_size(a.dtype) == cases[i].size);
        CHECK(!strcmp(ft_npy_dtype_descr(a.dtype), cases[i].descr));
        ft_npy_free(&a);
    }
}

TEST(npy_parse_scalar_and_empty) {
    ft_npy a;
    size_t len = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 4);
    REQUIRE(accepts(image, len, &a));
    CHECK(a.rank == 0 && a.count == 1 && a.nbytes == 4);
    ft_npy_free(&a);

    len = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 7), }", 0);
    REQUIRE(accepts(image, len, &a));
    CHECK(a.rank == 2 && a.count == 0 && a.nbytes == 0 && a.data != NULL);
    ft_npy_free(&a);

    len = make_npy(1, "{'descr': '|b1', 'fortran_order': False, 'shape': (3, 0, 2), }", 0);
    REQUIRE(accepts(image, len, &a));
    CHECK(a.count == 0 && a.data != NULL);
    ft_npy_free(&a);
}

TEST(npy_parse_header_variants) {
    static const char *dicts[] = {
        /* any key order */
        "{'shape': (2, 2), 'descr': '<f4', 'fortran_order': False}",
        "{'fortran_order': False, 'shape': (2, 2), 'descr': '<f4', }",
        /* whitespace, double quotes, no trailing comma */
        "{ \"descr\" :\"<f4\" ,\n 'fortran_order'\t:  False,'shape':(2,2)}",
        "  {'descr':'<f4','fortran_order':False,'shape':( 2 , 2 , )}  ",
        /* Python 2 long integers */
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 2L), }",
        /* native byte order spelled out */
        "{'descr': '=f4', 'fortran_order': False, 'shape': (2, 2), }",
    };
    for (size_t i = 0; i < sizeof dicts / sizeof dicts[0]; i++) {
        const size_t len = make_npy(1, dicts[i], 16);
        ft_npy a;
        if (!accepts(image, len, &a)) {
            fprintf(stderr, "  header: %s\n", dicts[i]);
            TEST_FAILED = 1;
            continue;
        }
        CHECK(a.dtype == FT_NPY_F32 && a.rank == 2 && a.shape[0] == 2 && a.shape[1] == 2);
        ft_npy_free(&a);
    }
    /* one-byte types take any byte-order character */
    const size_t len = make_npy(1, "{'descr': '<u1', 'fortran_order': False, 'shape': (3,), }", 3);
    ft_npy a;
    CHECK(accepts(image, len, &a));
    ft_npy_free(&a);
}

TEST(npy_parse_trailing_bytes_ignored) {
    const size_t len = make_npy(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", 9);
    ft_npy a;
    REQUIRE(accepts(image, len, &a));
    CHECK(a.count == 3);
    ft_npy_free(&a);
}

TEST(npy_reject_empty_and_magic) {
    CHECK(rejects("", 0, "empty"));
    CHECK(rejects(NULL, 0, "empty"));
    CHECK(rejects("PK\x03\x04 not numpy at all", 22, "magic"));
    CHECK(rejects("\x93NUMPZ\x01\x00", 8, "magic"));
    CHECK(rejects("\x93NUM", 4, "truncated"));
    CHECK(rejects("\x93NUMPY\x01", 7, "truncated"));
    CHECK(rejects("\x93NUMPY\x01\x00\x10", 9, "truncated"));
    CHECK(rejects("\x93NUMPY\x02\x00\x10\x00\x00", 11, "truncated"));
}

TEST(npy_reject_versions) {
    size_t len = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", 4);
    image[6] = 4;
    CHECK(rejects(image, len, "version 4.0"));
    image[6] = 1;
    image[7] = 1;
    CHECK(rejects(image, len, "version 1.1"));
    image[6] = 0;
    image[7] = 0;
    CHECK(rejects(image, len, "version 0.0"));
}

TEST(npy_reject_header_length_past_end) {
    size_t len = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", 4);
    image[8] = 0xff;
    image[9] = 0xff;
    CHECK(rejects(image, len, "header length 65535"));
    len = make_npy(2, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", 4);
    image[11] = 0xff; /* 4 GB header */
    CHECK(rejects(image, len, "runs past the end"));
}

TEST(npy_reject_truncated_everywhere) {
    /* every proper prefix of a valid file is rejected */
    const size_t len =
        make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24);
    static unsigned char copy[1024];
    memcpy(copy, image, len);
    for (size_t n = 0; n < len; n++) {
        ft_npy a;
        char err[256] = "";
        unsigned char *exact = malloc(n ? n : 1); /* exact-size buffer, for ASan */
        REQUIRE(exact);
        memcpy(exact, copy, n);
        const int rc = ft_npy_parse(exact, n, &a, err, sizeof err);
        free(exact);
        if (rc != -1 || !err[0]) {
            fprintf(stderr, "  prefix of %zu bytes accepted\n", n);
            TEST_FAILED = 1;
        }
        ft_npy_free(&a);
    }
    CHECK(rejects(copy, len - 1, "truncated data"));
    CHECK(rejects(copy, len - 1, "needs 24 bytes"));
}

TEST(npy_reject_dtypes) {
    size_t len = make_npy(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", 4);
    CHECK(rejects(image, len, "big-endian"));
    len = make_npy(1, "{'descr': '>i4', 'fortran_order': False, 'shape': (1,), }", 4);
    CHECK(rejects(image, len, "'>i4'"));
    len = make_npy(1, "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", 8);
    CHECK(rejects(image, len, "object"));
    len = make_npy(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", 8);
    CHECK(rejects(image, len, "unsupported dtype '<f8'"));
    len = make_npy(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }", 8);
    CHECK(rejects(image, len, "unsupported dtype"));
    len = make_npy(1, "{'descr': '|f4', 'fortran_order': False, 'shape': (1,), }", 4);
    CHECK(rejects(image, len, "byte order"));
    len = make_npy(1, "{'descr': '', 'fortran_order': False, 'shape': (1,), }", 4);
    CHECK(rejects(image, len, "unsupported dtype"));
    len = make_npy(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", 4);
    CHECK(rejects(image, len, "structured"));
    len = make_npy(1, "{'descr': 4, 'fortran_order': False, 'shape': (1,), }", 4);
    CHECK(rejects(image, len, "'descr' is not a string"));
}

TEST(npy_reject_fortran_order) {
    size_t len = make_npy(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16);
    CHECK(rejects(image, len, "Fortran"));
    len = make_npy(1, "{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 2), }", 16);
    CHECK(rejects(image, len, "fortran_order"));
    len = make_npy(1, "{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2, 2), }", 16);
    CHECK(rejects(image, len, "fortran_order"));
}

TEST(npy_reject_shapes) {
    size_t len = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -1), }", 64);
    CHECK(rejects(image, len, "shape (2, -1) has a negative dimension"));
    len = make_npy(
        1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 64);
    CHECK(rejects(image, len, "99999999999999999999"));
    len = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (9223372036854775808,), }",
                   64);
    CHECK(rejects(image, len, "64 bits"));
    len = make_npy(
        1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", 64);
    CHECK(rejects(image, len, "overflows"));
    /* fits in int64 elements but not in bytes */
    len = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904,), }",
                   64);
    CHECK(rejects(image, len, "overflows"));
    /* a zero dimension does not hide an overflowing product */
    len = make_npy(1,
                   "{'descr': '<f4', 'fortran_order': False, "
                   "'shape': (0, 4294967296, 4294967296), }",
                   0);
    CHECK(rejects(image, len, "overflows"));
    len =
        make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", 64);
    CHECK(rejects(image, len, "rank 9"));
    len = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': [2, 2], }", 16);
    CHECK(rejects(image, len, "not a tuple"));
    len = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }", 16);
    CHECK(rejects(image, len, "not a tuple of integers"));
    len = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2 2), }", 16);
    CHECK(rejects(image, len, "not a tuple of integers"));
    len = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2.5), }", 16);
    CHECK(rejects(image, len, "not a tuple of integers"));
    len = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,", 16);
    CHECK(rejects(image, len, "unterminated"));
}

TEST(npy_reject_dict_structure) {
    size_t len = make_npy(1, "['descr', '<f4']", 4);
    CHECK(rejects(image, len, "not a dict"));
    len = make_npy(1, "{'descr': '<f4', 'shape': (1,), }", 4);
    CHECK(rejects(image, len, "no 'fortran_order'"));
    len = make_npy(1, "{'fortran_order': False, 'shape': (1,), }", 4);
    CHECK(rejects(image, len, "no 'descr'"));
    len = make_npy(1, "{'descr': '<f4', 'fortran_order': False}", 4);
    CHECK(rejects(image, len, "no 'shape'"));
    len = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", 4);
    CHECK(rejects(image, len, "unknown key 'x'"));
    len = make_npy(1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", 4);
    CHECK(rejects(image, len, "twice"));
    len = make_npy(1, "{'descr' '<f4', 'fortran_order': False, 'shape': (1,)}", 4);
    CHECK(rejects(image, len, "expected ':'"));
    len = make_npy(1, "{'descr': '<f4' 'fortran_order': False, 'shape': (1,)}", 4);
    CHECK(rejects(image, len, "expected ','"));
    len = make_npy(1, "{'descr': '<f4, 'fortran_order': False, 'shape': (1,)}", 4);
    CHECK(rejects(image, len, "dtype"));
    len = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)", 4);
    CHECK(rejects(image, len, "unterminated dict"));
    len = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} junk", 4);
    CHECK(rejects(image, len, "after the dict"));
    len = make_npy(1, "{descr: '<f4'}", 4);
    CHECK(rejects(image, len, "quoted key"));
    len = make_npy(1, "{'descr': '<f\\x34', 'fortran_order': False, 'shape': (1,)}", 4);
    CHECK(rejects(image, len, "escaped"));
    len = make_npy(1, "", 4);
    CHECK(rejects(image, len, "not a dict"));
}

TEST(npy_reject_messages_are_one_printable_line) {
    /* control bytes and newlines inside the header never reach the message */
    size_t len = make_npy(1, "{'de\nsc\x01r': '<f4', 'fortran_order': False, 'shape': (1,), }", 4);
    CHECK(rejects(image, len, "unknown key 'de?sc?r'"));
    len = make_npy(1, "{'descr': '<f\n4', 'fortran_order': False, 'shape': (1,), }", 4);
    CHECK(rejects(image, len, "'<f?4'"));
    /* a long key is cut */
    char dict[400];
    memset(dict, 0, sizeof dict);
    strcpy(dict, "{'");
    memset(dict + 2, 'k', 300);
    strcat(dict, "': 1}");
    len = make_npy(1, dict, 0);
    ft_npy a;
    char err[1024] = "";
    CHECK(ft_npy_parse(image, len, &a, err, sizeof err) == -1);
    CHECK(strlen(err) < 120);
    CHECK(strstr(err, "...") != NULL);
    /* a tiny or absent message buffer is fine */
    char small[8];
    CHECK(ft_npy_parse(image, len, &a, small, sizeof small) == -1);
    CHECK(strlen(small) < sizeof small);
    CHECK(ft_npy_parse(image, len, &a, NULL, 0) == -1);
}

/* Flips every byte of a valid header to a few values: nothing crashes, and whatever is accepted
 * is consistent with the buffer length. */
TEST(npy_parse_mutations) {
    const size_t len =
        make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24);
    static unsigned char base[256], work[256];
    memcpy(base, image, len);
    static const unsigned char values[] = {0, ' ', '\'', '(', ')', ',', '-', '9', '}', 0xff};
    int accepted = 0;
    for (size_t i = 0; i < len; i++) {
        for (size_t v = 0; v < sizeof values; v++) {
            memcpy(work, base, len);
            work[i] = values[v];
            ft_npy a;
            char err[256] = "";
            if (ft_npy_parse(work, len, &a, err, sizeof err) == 0) {
                accepted++;
                CHECK(a.nbytes <= len);
                CHECK(a.data != NULL);
            } else {
                CHECK(err[0] != '\0');
                CHECK(strchr(err, '\n') == NULL);
            }
            ft_npy_free(&a);
        }
    }
    CHECK(accepted > 0);
}

/* -- files ------------------------------------------------------------------------------------- */

static int make_temp_dir(char *dir, size_t len) {
    snprintf(dir, len, "/tmp/fai_npy_test.XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[1024];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

TEST(npy_write_round_trip) {
    char dir[64], path[128];
    REQUIRE(make_temp_dir(dir, sizeof dir) == 0);
    snprintf(path, sizeof path, "%s/a.npy", dir);

    float data[2 * 3 * 4];
    for (int i = 0; i < 24; i++)
        data[i] = (float)i * 0.5f - 3.0f;
    const int64_t shape[3] = {2, 3, 4};
    char err[512] = "";
    REQUIRE(ft_npy_save(path, FT_NPY_F32, 3, shape, data, err, sizeof err) == 0);
    CHECK(count_entries(dir) == 1);

    ft_npy a;
    REQUIRE(ft_npy_load(path, &a, err, sizeof err) == 0);
    CHECK(a.dtype == FT_NPY_F32 && a.rank == 3);
    CHECK(a.shape[0] == 2 && a.shape[1] == 3 && a.shape[2] == 4);
    CHECK(a.nbytes == sizeof data && memcmp(a.data, data, sizeof data) == 0);
    CHECK(((uintptr_t)a.data % 64) == 0);
    ft_npy_free(&a);

    /* the header is numpy's: version 1.0, payload on a 64-byte boundary, dict text */
    FILE *f = fopen(path, "rb");
    REQUIRE(f);
    unsigned char head[128];
    const size_t got = fread(head, 1, sizeof head, f);
    fclose(f);
    REQUIRE(got == sizeof head);
    CHECK(!memcmp(head, "\x93NUMPY\x01\x00", 8));
    const size_t hlen = head[8] | (size_t)head[9] << 8;
    CHECK((10 + hlen) % 64 == 0);
    CHECK(head[10 + hlen - 1] == '\n');
    CHECK(!memcmp(head + 10, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 4), }", 62));

    /* rewrite in place with other contents, then every dtype, rank 0, 1 and zero-size */
    const int64_t s1[1] = {5};
    const uint16_t halves[5] = {0x3c00, 0xc000, 0x7c00, 0, 1};
    REQUIRE(ft_npy_save(path, FT_NPY_F16, 1, s1, halves, err, sizeof err) == 0);
    REQUIRE(ft_npy_load(path, &a, err, sizeof err) == 0);
    CHECK(a.dtype == FT_NPY_F16 && a.rank == 1 && a.shape[0] == 5);
    CHECK(!memcmp(a.data, halves, sizeof halves));
    ft_npy_free(&a);

    const int32_t one = 42;
    REQUIRE(ft_npy_save(path, FT_NPY_I32, 0, NULL, &one, err, sizeof err) == 0);
    REQUIRE(ft_npy_load(path, &a, err, sizeof err) == 0);
    CHECK(a.rank == 0 && a.count == 1 && *(const int32_t *)a.data == 42);
    ft_npy_free(&a);

    const int64_t s0[2] = {0, 3};
    REQUIRE(ft_npy_save(path, FT_NPY_BOOL, 2, s0, NULL, err, sizeof err) == 0);
    REQUIRE(ft_npy_load(path, &a, err, sizeof err) == 0);
    CHECK(a.dtype == FT_NPY_BOOL && a.count == 0 && a.shape[1] == 3);
    ft_npy_free(&a);

    const int64_t s8[8] = {1, 2, 1, 2, 1, 2, 1, 2};
    uint8_t bytes[16];
    for (int i = 0; i < 16; i++)
        bytes[i] = (uint8_t)(i * 7);
    static const ft_npy_dtype dts[] = {FT_NPY_U8, FT_NPY_BOOL};
    for (int k = 0; k < 2; k++) {
        REQUIRE(ft_npy_save(path, dts[k], 8, s8, bytes, err, sizeof err) == 0);
        REQUIRE(ft_npy_load(path, &a, err, sizeof err) == 0);
        CHECK(a.dtype == dts[k] && a.rank == 8 && a.count == 16);
        CHECK(!memcmp(a.data, bytes, 16));
        ft_npy_free(&a);
    }
    uint16_t bf[4] = {0x3f80, 0x4000, 0xbf80, 0x7f80};
    const int64_t s4[2] = {2, 2};
    REQUIRE(ft_npy_save(path, FT_NPY_U16, 2, s4, bf, err, sizeof err) == 0);
    REQUIRE(ft_npy_load(path, &a, err, sizeof err) == 0);
    CHECK(a.dtype == FT_NPY_U16 && !memcmp(a.data, bf, sizeof bf));
    ft_npy_free(&a);

    CHECK(count_entries(dir) == 1); /* no temporary files left behind */
    remove_dir(dir);
}

TEST(npy_write_failure_leaves_nothing) {
    char dir[64], path[160], err[512] = "";
    REQUIRE(make_temp_dir(dir, sizeof dir) == 0);
    const float x = 1.0f;
    const int64_t s1[1] = {1};
    /* a directory that does not exist */
    snprintf(path, sizeof path, "%s/missing/o.npy", dir);
    CHECK(ft_npy_save(path, FT_NPY_F32, 1, s1, &x, err, sizeof err) == -1);
    CHECK(strstr(err, "missing/o.npy") != NULL);
    CHECK(count_entries(dir) == 0);
    /* a directory name instead of a file name */
    snprintf(path, sizeof path, "%s/", dir);
    CHECK(ft_npy_save(path, FT_NPY_F32, 1, s1, &x, err, sizeof err) == -1);
    CHECK(count_entries(dir) == 0);
    /* shapes no file can hold: the error names the dimension and the shape */
    snprintf(path, sizeof path, "%s/o.npy", dir);
    const int64_t negative[2] = {2, -1}, huge[2] = {INT64_C(1) << 40, INT64_C(1) << 40};
    const int64_t wide[2] = {INT64_C(1) << 31, INT64_C(1) << 31};
    CHECK(ft_npy_save(path, FT_NPY_F32, 2, negative, &x, err, sizeof err) == -1);
    CHECK(strstr(err, "dimension 1 of shape (2, -1) is negative") != NULL);
    CHECK(ft_npy_save(path, FT_NPY_F32, 2, huge, &x, err, sizeof err) == -1);
    CHECK(strstr(err, "shape (1099511627776, 1099511627776) holds more than 2^63") != NULL);
    CHECK(ft_npy_save(path, FT_NPY_F32, 2, wide, &x, err, sizeof err) == -1);
    CHECK(strstr(err, "of 4-byte elements is past the address space") != NULL);
    CHECK(count_entries(dir) == 0);

    /* write_temp + discard: the target is never created */
    char tmp[512];
    snprintf(path, sizeof path, "%s/o.npy", dir);
    REQUIRE(ft_npy_write_temp(path, FT_NPY_F32, 1, s1, &x, tmp, sizeof tmp, err, sizeof err) == 0);
    CHECK(count_entries(dir) == 1);
    CHECK(strncmp(tmp, dir, strlen(dir)) == 0);
    ft_npy_discard(tmp);
    CHECK(count_entries(dir) == 0);

    /* an existing target survives a failed commit of a vanished temporary file */
    REQUIRE(ft_npy_save(path, FT_NPY_F32, 1, s1, &x, err, sizeof err) == 0);
    CHECK(ft_npy_commit("/nonexistent-dir/.tmp", path, err, sizeof err) == -1);
    ft_npy a;
    REQUIRE(ft_npy_load(path, &a, err, sizeof err) == 0);
    CHECK(*(const float *)a.data == 1.0f);
    ft_npy_free(&a);
    remove_dir(dir);
}

/* ft_npy_keep + commit + undo_commit, as `fai run` uses them to write O and LSE both or neither:
 * undoing a commit puts back the file that was there (through a link: the file it leads to), or
 * removes the committed one when there was none, and leaves no temporary file behind. */
static float first_value(const char *path) {
    ft_npy a;
    char err[512];
    if (ft_npy_load(path, &a, err, sizeof err)) return -1.0f;
    const float v = *(const float *)a.data;
    ft_npy_free(&a);
    return v;
}

static int commit_value(const char *path, float x, char *err, size_t errlen) {
    const int64_t s1[1] = {1};
    char tmp[512];
    if (ft_npy_write_temp(path, FT_NPY_F32, 1, s1, &x, tmp, sizeof tmp, err, errlen)) return -1;
    return ft_npy_commit(tmp, path, err, errlen);
}

TEST(npy_commit_can_be_undone) {
    char dir[64], path[160], link_path[160], kept[512], err[512] = "";
    REQUIRE(make_temp_dir(dir, sizeof dir) == 0);
    snprintf(path, sizeof path, "%s/o.npy", dir);

    /* a file there before: kept, replaced, put back */
    REQUIRE(commit_value(path, 1.0f, err, sizeof err) == 0);
    const int kept_state = ft_npy_keep(path, kept, sizeof kept);
    CHECK(kept_state == 1 && count_entries(dir) == 2);
    REQUIRE(commit_value(path, 2.0f, err, sizeof err) == 0);
    CHECK(first_value(path) == 2.0f);
    CHECK(ft_npy_undo_commit(path, kept, kept_state) == 0);
    CHECK(first_value(path) == 1.0f);
    CHECK(count_entries(dir) == 1);

    /* kept and not needed: discarding it leaves the new file alone */
    REQUIRE(ft_npy_keep(path, kept, sizeof kept) == 1);
    REQUIRE(commit_value(path, 3.0f, err, sizeof err) == 0);
    ft_npy_discard(kept);
    CHECK(first_value(path) == 3.0f && count_entries(dir) == 1);

    /* nothing there before: undoing removes what the commit made */
    char fresh[160];
    snprintf(fresh, sizeof fresh, "%s/new.npy", dir);
    const int none = ft_npy_keep(fresh, kept, sizeof kept);
    CHECK(none == 0 && count_entries(dir) == 1);
    REQUIRE(commit_value(fresh, 4.0f, err, sizeof err) == 0);
    CHECK(count_entries(dir) == 2);
    CHECK(ft_npy_undo_commit(fresh, kept, none) == 0);
    CHECK(count_entries(dir) == 1 && access(fresh, F_OK) != 0);

    /* through a symbolic link: the file it leads to is kept and put back, the link stays */
    snprintf(link_path, sizeof link_path, "%s/l.npy", dir);
    REQUIRE(symlink("o.npy", link_path) == 0);
    const int through = ft_npy_keep(link_path, kept, sizeof kept);
    CHECK(through == 1);
    REQUIRE(commit_value(link_path, 5.0f, err, sizeof err) == 0);
    CHECK(first_value(path) == 5.0f);
    CHECK(ft_npy_undo_commit(link_path, kept, through) == 0);
    CHECK(first_value(path) == 3.0f && first_value(link_path) == 3.0f);
    struct stat st;
    CHECK(lstat(link_path, &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(count_entries(dir) == 2);

    /* nothing to keep in a directory that does not exist; a path no output may take (a
     * directory) keeps nothing, and nothing can be undone with that */
    char missing[160];
    snprintf(missing, sizeof missing, "%s/missing/o.npy", dir);
    CHECK(ft_npy_keep(missing, kept, sizeof kept) == 0);
    CHECK(ft_npy_keep(dir, kept, sizeof kept) == -1 && kept[0] == '\0');
    CHECK(ft_npy_undo_commit(dir, kept, -1) == -1);
    CHECK(count_entries(dir) == 2);
    remove_dir(dir);
}

TEST(npy_load_errors_name_the_file) {
    char dir[64], path[128], err[512] = "";
    REQUIRE(make_temp_dir(dir, sizeof dir) == 0);
    ft_npy a;
    snprintf(path, sizeof path, "%s/none.npy", dir);
    CHECK(ft_npy_load(path, &a, err, sizeof err) == -1);
    CHECK(strstr(err, path) == err);
    CHECK(ft_npy_load(dir, &a, err, sizeof err) == -1);
    CHECK(strstr(err, "directory") != NULL);

    snprintf(path, sizeof path, "%s/q.npy", dir);
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    const size_t len =
        make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -1), }", 0);
    fwrite(image, 1, len, f);
    fclose(f);
    CHECK(ft_npy_load(path, &a, err, sizeof err) == -1);
    char want[256];
    snprintf(want, sizeof want, "%s: shape (2, -1) has a negative dimension", path);
    CHECK(!strcmp(err, want));
    CHECK(a.data == NULL);

    f = fopen(path, "wb");
    REQUIRE(f);
    fclose(f);
    CHECK(ft_npy_load(path, &a, err, sizeof err) == -1);
    CHECK(strstr(err, "empty") != NULL);

    /* a header whose length is not a multiple of 64 still gives aligned data */
    f = fopen(path, "wb");
    REQUIRE(f);
    static const char odd[] = "\x93NUMPY\x01\x00\x3a\x00"
                              "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n";
    fwrite(odd, 1, sizeof odd - 1, f);
    const float two[2] = {1.5f, -2.0f};
    fwrite(two, sizeof two, 1, f);
    fclose(f);
    REQUIRE(ft_npy_load(path, &a, err, sizeof err) == 0);
    CHECK(((uintptr_t)a.data % 64) == 0);
    CHECK(!memcmp(a.data, two, sizeof two));
    ft_npy_free(&a);
    remove_dir(dir);
}

TEST(npy_format_shape) {
    char buf[64];
    const int64_t s[3] = {2, 5, 64};
    ft_npy_format_shape(buf, sizeof buf, 0, s);
    CHECK(!strcmp(buf, "()"));
    ft_npy_format_shape(buf, sizeof buf, 1, s);
    CHECK(!strcmp(buf, "(2,)"));
    ft_npy_format_shape(buf, sizeof buf, 3, s);
    CHECK(!strcmp(buf, "(2, 5, 64)"));
    ft_npy_format_shape(buf, 4, 3, s);
    CHECK(strlen(buf) == 3);
}
