/* json.h: a small JSON reader for the files meshgrad writes (flight recorder
 * dumps, traces) and the headers and configs of other programs' models
 * (safetensors, config.json). It reads from a stream, one byte at a time, so a file is
 * never held whole: a caller walks the large arrays of a file element by
 * element (mg_json_enter, mg_json_next) and reads each element as a small
 * tree of values (mg_json_read), freed before the next; mg_json_parse reads a
 * text in memory as one tree. Numbers keep an exact int64 when they are
 * written as integers (nanosecond times do not fit a double). A string is at
 * most MG_JSON_MAX_STRING bytes, values nest at most 64 deep. Errors say
 * where (line and column) and what was expected. Memory is what the trees
 * read hold, and time is linear in the text.
 * Exports: mg_json, mg_json_type, mg_json_reader, mg_json_reader_init,
 * mg_json_enter, mg_json_next, mg_json_read, mg_json_skip, mg_json_finish,
 * mg_json_parse, mg_json_free, mg_json_get, mg_json_int, mg_json_str,
 * mg_json_count. */
#ifndef MG_IO_JSON_H
#define MG_IO_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define MG_JSON_MAX_STRING (1 << 20)
#define MG_JSON_MAX_NESTING 64

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
    int exact;                /* NUMBER: written as an integer that fits int64 (`integer`) */
    char *string;             /* STRING */
    char *key;                /* a member of an OBJECT: its key */
    struct mg_json *child;    /* ARRAY, OBJECT: the first element or member */
    struct mg_json *next;     /* the next element or member of the parent */
    int n;                    /* ARRAY, OBJECT: how many */
} mg_json;

/* A reader of one JSON text from `f`: the containers entered and not yet
 * left, where it stands, and the first error. */
typedef struct {
    FILE *f;
    int peek;                         /* the next byte, or EOF */
    long line, column;                /* of `peek` */
    char open[MG_JSON_MAX_NESTING];   /* '{' or '[' of each container entered */
    char first[MG_JSON_MAX_NESTING];  /* 1 while no item of it was read */
    int depth;
    char *buf;                        /* a string as it is read */
    size_t cap;
    int failed;
    char err[200];                    /* "line L, column C: ..." */
} mg_json_reader;

void mg_json_reader_init(mg_json_reader *r, FILE *f);
/* Frees what the reader holds (not f). */
void mg_json_reader_free(mg_json_reader *r);
/* The next value is an object (open '{') or array ('['): enters it. 1, or 0
 * with the error in r->err. */
int mg_json_enter(mg_json_reader *r, char open);
/* In the container entered last: 1 when another item follows (an object's
 * member: its key in key[keylen], cut to fit; the value is read next), 0 at
 * its end (left), -1 on an error. */
int mg_json_next(mg_json_reader *r, char *key, size_t keylen);
/* The next value, as a tree (mg_json_free); NULL on an error. */
mg_json *mg_json_read(mg_json_reader *r);
/* Reads past the next value without keeping it: 1, or 0 on an error. */
int mg_json_skip(mg_json_reader *r);
/* After the top value: 1 when only white space follows, else 0. */
int mg_json_finish(mg_json_reader *r);

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
/* 1 when v is a number written as an integer from 0 to INT64_MAX (*out gets
 * it), else 0: a size or offset, never rounded. */
int mg_json_count(const mg_json *v, int64_t *out);

#endif
