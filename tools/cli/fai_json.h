/* The tools' one JSON writer: every --json output of `fai` and `fai-mpi` goes through it.
 *
 * A writer keeps, per open object or array, whether a value was written yet, and so places the
 * separators itself; at most FT_JSON_MAX_DEPTH - 1 levels nest. Two spacings: ", " and ": " (most
 * outputs), or "," and ":" (compact). Keys and strings are escaped (quotes, backslashes, control
 * characters); numbers are written with the caller's printf format, and as null when they are not
 * finite. Closing the outermost object or array ends the line. Output goes to one FILE, unbuffered
 * by the writer. */
#ifndef FAI_JSON_H
#define FAI_JSON_H

#include <stdio.h>

#define FT_JSON_MAX_DEPTH 16

typedef struct ft_json {
    FILE *out;
    int compact;
    int depth;
    char closers[FT_JSON_MAX_DEPTH];             /* per open level: '}' or ']' */
    unsigned char has_values[FT_JSON_MAX_DEPTH]; /* per level: a value was written */
} ft_json;

/* A writer to out; compact: no space after "," and ":". Writes nothing yet. */
void ft_json_init(ft_json *json, FILE *out, int compact);

/* Opens an object or an array: a member of the enclosing object when key is not NULL, else an
 * element of the enclosing array (or the outermost value). */
void ft_json_object(ft_json *json, const char *key);
void ft_json_array(ft_json *json, const char *key);

/* Closes the innermost object or array; closing the outermost one writes a newline. */
void ft_json_end(ft_json *json);

/* Values, with a key inside an object and key NULL inside an array. */
void ft_json_string(ft_json *json, const char *key, const char *value);
void ft_json_int(ft_json *json, const char *key, long long value);
void ft_json_number(ft_json *json, const char *key, const char *format, double value);
void ft_json_bool(ft_json *json, const char *key, int value);
void ft_json_null(ft_json *json, const char *key);

#endif
