/* json.h: a small JSON reader for the files meshgrad writes (flight recorder
 * dumps, traces): the text becomes a tree of values. Numbers keep an exact
 * int64 when they are written as integers (nanosecond times do not fit a
 * double). Errors say where (line and column) and what was expected.
 * Exports: mg_json, mg_json_type, mg_json_parse, mg_json_free, mg_json_get,
 * mg_json_int, mg_json_str. */
#ifndef MG_CLI_JSON_H
#define MG_CLI_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    MG_JSON_NULL = 0,
    MG_JSON_BOOL,
    MG_JSON_NUMBER,
    MG_JSON_STRING,
    MG_JSON_ARRAY,
    MG_JSON_OBJECT
} mg_json_type;

typedef struct mg_json {
    mg_json_type type;
    double number;            /* NUMBER (and BOOL: 0 or 1) */
    int64_t integer;          /* NUMBER written as an integer; else the number truncated */
    char *string;             /* STRING */
    char *key;                /* a member of an OBJECT: its key */
    struct mg_json *child;    /* ARRAY, OBJECT: the first element or member */
    struct mg_json *next;     /* the next element or member of the parent */
    int n;                    /* ARRAY, OBJECT: how many */
} mg_json;

/* The value in text[0, len); NULL with a message ("line L, column C: ...")
 * in err on malformed input or out of memory. */
mg_json *mg_json_parse(const char *text, size_t len, char *err, size_t errlen);
void mg_json_free(mg_json *v);
/* The member `key` of an object, or NULL. */
const mg_json *mg_json_get(const mg_json *obj, const char *key);
/* The member as an integer (or dflt when absent or not a number); as a
 * string (or dflt when absent or not a string). */
int64_t mg_json_int(const mg_json *obj, const char *key, int64_t dflt);
const char *mg_json_str(const mg_json *obj, const char *key, const char *dflt);

#endif
