/* fuzz_npy.c - the .npy reader (tools/cli/fai_npy.c) on arbitrary bytes.
 *
 * ft_npy_parse must never read outside the given bytes (the input is copied into an allocation
 * of exactly its size, so ASan sees any overread). On success the array must be consistent: data
 * 64-byte aligned and not NULL, count the product of the shape, nbytes count times the element
 * size, and the payload a copy of the bytes right after the header. On failure the array is empty
 * and the message is one non-empty printable line. */
#include "fai_npy.h"
#include "fuzz_input.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check_array(const uint8_t *buf, size_t len, const ft_npy *a) {
    CHECK(a->data != NULL && a->buffer != NULL);
    CHECK(((uintptr_t)a->data & 63) == 0);
    CHECK(a->rank >= 0 && a->rank <= FT_NPY_MAX_RANK);
    size_t count = 1;
    for (int i = 0; i < a->rank; i++) {
        CHECK(a->shape[i] >= 0);
        count *= (size_t)a->shape[i];
    }
    CHECK(count == a->count);
    const size_t element = ft_npy_dtype_size(a->dtype);
    CHECK(element > 0);
    CHECK(a->nbytes == count * element);
    /* the payload follows the header: 10 bytes of preamble for version 1, 12 for 2 and 3 */
    CHECK(len >= 10 && memcmp(buf, "\x93NUMPY", 6) == 0);
    const size_t header =
        buf[6] == 1 ? 10 + (size_t)(buf[8] | buf[9] << 8)
                    : 12 + (size_t)(buf[8] | buf[9] << 8 | buf[10] << 16 | (uint32_t)buf[11] << 24);
    CHECK(header <= len && a->nbytes <= len - header);
    CHECK(memcmp(a->data, buf + header, a->nbytes) == 0);
    char shape[256];
    ft_npy_format_shape(shape, sizeof shape, a->rank, a->shape);
    CHECK(shape[0] == '(' && strchr(shape, ')') != NULL);
    ft_npy_format_shape(shape, 4, a->rank, a->shape);
    CHECK(strlen(shape) < 4);
    CHECK(ft_npy_dtype_descr(a->dtype)[0] != '?');
    CHECK(ft_npy_dtype_name(a->dtype)[0] != '?');
}

static void check_message(const char *err) {
    CHECK(err[0] != '\0');
    for (const char *c = err; *c; c++)
        CHECK(*c >= 0x20 && *c < 0x7f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* an exact-size copy: reading one byte past the input is a heap overflow */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    if (size) memcpy(buf, data, size);
    ft_npy a;
    char err[512];
    memset(err, 0, sizeof err);
    if (ft_npy_parse(buf, size, &a, err, sizeof err) == 0) {
        check_array(buf, size, &a);
        ft_npy_free(&a);
        CHECK(a.buffer == NULL && a.data == NULL);
    } else {
        CHECK(a.buffer == NULL && a.data == NULL && a.count == 0);
        check_message(err);
        /* a short message buffer is still terminated, a NULL one is accepted */
        char tiny[8];
        memset(tiny, 'x', sizeof tiny);
        CHECK(ft_npy_parse(buf, size, &a, tiny, sizeof tiny) != 0);
        CHECK(memchr(tiny, '\0', sizeof tiny) != NULL);
        CHECK(ft_npy_parse(buf, size, &a, NULL, 0) != 0);
    }
    ft_npy_free(&a);
    free(buf);
    return 0;
}
