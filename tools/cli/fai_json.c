/* fai_json.c - the tools' JSON writer (fai_json.h). */
#include "fai_json.h"

#include <math.h>

void ft_json_init(ft_json *json, FILE *out, int compact) {
    json->out = out;
    json->compact = compact;
    json->depth = 0;
    json->has_values[0] = 0;
}

static void write_escaped(FILE *out, const char *text) {
    fputc('"', out);
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        switch (*c) {
        case '"':
            fputs("\\\"", out);
            break;
        case '\\':
            fputs("\\\\", out);
            break;
        case '\b':
            fputs("\\b", out);
            break;
        case '\f':
            fputs("\\f", out);
            break;
        case '\n':
            fputs("\\n", out);
            break;
        case '\r':
            fputs("\\r", out);
            break;
        case '\t':
            fputs("\\t", out);
            break;
        default:
            if (*c < 0x20)
                fprintf(out, "\\u%04x", *c);
            else
                fputc(*c, out);
        }
    }
    fputc('"', out);
}

/* The separator before a value at the current level, and its key. */
static void begin_value(ft_json *json, const char *key) {
    if (json->has_values[json->depth]) fputs(json->compact ? "," : ", ", json->out);
    json->has_values[json->depth] = 1;
    if (key) {
        write_escaped(json->out, key);
        fputs(json->compact ? ":" : ": ", json->out);
    }
}

static void open_level(ft_json *json, const char *key, char bracket, char closer) {
    begin_value(json, key);
    fputc(bracket, json->out);
    if (json->depth + 1 < FT_JSON_MAX_DEPTH) json->depth++;
    json->closers[json->depth] = closer;
    json->has_values[json->depth] = 0;
}

void ft_json_object(ft_json *json, const char *key) { open_level(json, key, '{', '}'); }

void ft_json_array(ft_json *json, const char *key) { open_level(json, key, '[', ']'); }

void ft_json_end(ft_json *json) {
    if (json->depth == 0) return;
    fputc(json->closers[json->depth], json->out);
    json->depth--;
    if (json->depth == 0) {
        fputc('\n', json->out);
        json->has_values[0] = 0;
    }
}

void ft_json_string(ft_json *json, const char *key, const char *value) {
    begin_value(json, key);
    write_escaped(json->out, value);
}

void ft_json_int(ft_json *json, const char *key, long long value) {
    begin_value(json, key);
    fprintf(json->out, "%lld", value);
}

void ft_json_number(ft_json *json, const char *key, const char *format, double value) {
    begin_value(json, key);
    if (isfinite(value))
        fprintf(json->out, format, value);
    else
        fputs("null", json->out);
}

void ft_json_bool(ft_json *json, const char *key, int value) {
    begin_value(json, key);
    fputs(value ? "true" : "false", json->out);
}

void ft_json_null(ft_json *json, const char *key) {
    begin_value(json, key);
    fputs("null", json->out);
}
