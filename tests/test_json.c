/* Tests of the tools' JSON writer: separators in both spacings, nesting, null for non-finite
 * numbers, and the escaping of quotes, backslashes and control characters in keys and strings. */
#include "test_util.h"

#include "fai_json.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The text the writer wrote to a temporary file, in buf (NUL-terminated). */
static void read_back(FILE *f, char *buf, size_t size) {
    rewind(f);
    const size_t n = fread(buf, 1, size - 1, f);
    buf[n] = '\0';
}

TEST(json_spaced_nesting) {
    FILE *f = tmpfile();
    REQUIRE(f != NULL);
    ft_json json;
    ft_json_init(&json, f, 0);
    ft_json_object(&json, NULL);
    ft_json_string(&json, "a", "x");
    ft_json_int(&json, "b", -3);
    ft_json_array(&json, "c");
    ft_json_array(&json, NULL);
    ft_json_int(&json, NULL, 1);
    ft_json_int(&json, NULL, 2);
    ft_json_end(&json);
    ft_json_object(&json, NULL);
    ft_json_end(&json);
    ft_json_end(&json);
    ft_json_number(&json, "d", "%.2f", 1.5);
    ft_json_number(&json, "e", "%.2f", NAN);
    ft_json_number(&json, "f", "%g", INFINITY);
    ft_json_bool(&json, "g", 1);
    ft_json_null(&json, "h");
    ft_json_end(&json);
    char buf[512];
    read_back(f, buf, sizeof buf);
    CHECK(!strcmp(buf, "{\"a\": \"x\", \"b\": -3, \"c\": [[1, 2], {}], \"d\": 1.50, \"e\": null, "
                       "\"f\": null, \"g\": true, \"h\": null}\n"));
    fclose(f);
}

TEST(json_compact_and_lines) {
    FILE *f = tmpfile();
    REQUIRE(f != NULL);
    ft_json json;
    ft_json_init(&json, f, 1);
    for (int line = 0; line < 2; line++) {
        ft_json_object(&json, NULL);
        ft_json_int(&json, "n", line);
        ft_json_array(&json, "t");
        ft_json_bool(&json, NULL, 0);
        ft_json_int(&json, NULL, 7);
        ft_json_end(&json);
        ft_json_end(&json);
    }
    char buf[256];
    read_back(f, buf, sizeof buf);
    CHECK(!strcmp(buf, "{\"n\":0,\"t\":[false,7]}\n{\"n\":1,\"t\":[false,7]}\n"));
    fclose(f);
}

TEST(json_escapes) {
    FILE *f = tmpfile();
    REQUIRE(f != NULL);
    ft_json json;
    ft_json_init(&json, f, 0);
    ft_json_object(&json, NULL);
    ft_json_string(&json, "k\"ey", "a\"b\\c/d\n\t\r\b\f\x01\x1f\x7f\xc3\xa9");
    ft_json_end(&json);
    char buf[256];
    read_back(f, buf, sizeof buf);
    CHECK(!strcmp(buf,
                  "{\"k\\\"ey\": \"a\\\"b\\\\c/d\\n\\t\\r\\b\\f\\u0001\\u001f\x7f\xc3\xa9\"}\n"));
    fclose(f);
}
