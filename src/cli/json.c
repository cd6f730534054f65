/* json.c: the JSON reader (see json.h): recursive descent over the text,
 * one mg_json per value. Exports: mg_json_parse, mg_json_free, mg_json_get,
 * mg_json_int, mg_json_str. */
#include "cli/json.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NESTING 64

typedef struct {
    const char *s, *end, *at;
    char *err;
    size_t errlen;
    int failed;
} reader;

static void fail(reader *r, const char *fmt, ...) {
    if (r->failed) return;
    r->failed = 1;
    int line = 1, col = 1;
    for (const char *p = r->s; p < r->at; p++) {
        col++;
        if (*p == '\n') line++, col = 1;
    }
    int k = snprintf(r->err, r->errlen, "line %d, column %d: ", line, col);
    if (k < 0 || (size_t)k >= r->errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err + k, r->errlen - (size_t)k, fmt, ap);
    va_end(ap);
}

static void skip_space(reader *r) {
    while (r->at < r->end && (*r->at == ' ' || *r->at == '\n' || *r->at == '\r' || *r->at == '\t'))
        r->at++;
}

static int literal(reader *r, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(r->end - r->at) < n || memcmp(r->at, word, n) != 0) return 0;
    r->at += n;
    return 1;
}

/* A string's text, escapes undone (\uXXXX above 0x7f becomes '?'). */
static char *string(reader *r) {
    r->at++; /* the opening quote */
    char *out = malloc((size_t)(r->end - r->at) + 1);
    if (!out) {
        fail(r, "out of memory");
        return NULL;
    }
    size_t n = 0;
    while (r->at < r->end && *r->at != '"') {
        char ch = *r->at++;
        if ((unsigned char)ch < 0x20) {
            fail(r, "a control character inside a string");
            break;
        }
        if (ch == '\\') {
            if (r->at >= r->end) break;
            char e = *r->at++;
            switch (e) {
            case 'n': ch = '\n'; break;
            case 't': ch = '\t'; break;
            case 'r': ch = '\r'; break;
            case 'b': ch = '\b'; break;
            case 'f': ch = '\f'; break;
            case 'u': {
                unsigned v = 0;
                for (int i = 0; i < 4 && r->at < r->end; i++, r->at++) {
                    char h = *r->at;
                    v = v * 16 + (unsigned)(h >= '0' && h <= '9' ? h - '0'
                                            : h >= 'a' && h <= 'f' ? h - 'a' + 10
                                            : h >= 'A' && h <= 'F' ? h - 'A' + 10 : 0);
                }
                ch = v < 0x80 ? (char)v : '?';
                break;
            }
            default: ch = e; /* \" \\ \/ */
            }
        }
        out[n++] = ch;
    }
    if (!r->failed && r->at >= r->end) fail(r, "a string is not closed");
    if (r->failed) {
        free(out);
        return NULL;
    }
    r->at++; /* the closing quote */
    out[n] = '\0';
    return out;
}

static mg_json *value(reader *r, int depth);

/* Elements of an array or members of an object, up to `close`. */
static void items(reader *r, mg_json *v, char close, int depth) {
    r->at++;
    mg_json **tail = &v->child;
    skip_space(r);
    if (r->at < r->end && *r->at == close) {
        r->at++;
        return;
    }
    for (;;) {
        char *key = NULL;
        skip_space(r);
        if (close == '}') {
            if (r->at >= r->end || *r->at != '"') {
                fail(r, "expected a member's \"key\"");
                return;
            }
            if (!(key = string(r))) return;
            skip_space(r);
            if (r->at >= r->end || *r->at != ':') {
                free(key);
                fail(r, "expected ':' after a key");
                return;
            }
            r->at++;
        }
        mg_json *item = value(r, depth + 1);
        if (!item) {
            free(key);
            return;
        }
        item->key = key;
        *tail = item;
        tail = &item->next;
        v->n++;
        skip_space(r);
        if (r->at < r->end && *r->at == ',') {
            r->at++;
            continue;
        }
        if (r->at < r->end && *r->at == close) {
            r->at++;
            return;
        }
        fail(r, "expected ',' or '%c'", close);
        return;
    }
}

static mg_json *value(reader *r, int depth) {
    skip_space(r);
    if (r->at >= r->end) {
        fail(r, "the text ends where a value was expected");
        return NULL;
    }
    if (depth > MAX_NESTING) {
        fail(r, "nested deeper than %d", MAX_NESTING);
        return NULL;
    }
    mg_json *v = calloc(1, sizeof *v);
    if (!v) {
        fail(r, "out of memory");
        return NULL;
    }
    char ch = *r->at;
    if (ch == '{' || ch == '[') {
        v->type = ch == '{' ? MG_JSON_OBJECT : MG_JSON_ARRAY;
        items(r, v, ch == '{' ? '}' : ']', depth);
    } else if (ch == '"') {
        v->type = MG_JSON_STRING;
        v->string = string(r);
    } else if (literal(r, "true")) {
        v->type = MG_JSON_BOOL;
        v->number = v->integer = 1;
    } else if (literal(r, "false")) {
        v->type = MG_JSON_BOOL;
    } else if (literal(r, "null")) {
        v->type = MG_JSON_NULL;
    } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
        char buf[64];
        size_t n = 0;
        int integral = 1;
        while (r->at < r->end && n + 1 < sizeof buf && strchr("+-0123456789.eE", *r->at)) {
            integral &= *r->at != '.' && *r->at != 'e' && *r->at != 'E';
            buf[n++] = *r->at++;
        }
        buf[n] = '\0';
        char *end;
        errno = 0;
        v->type = MG_JSON_NUMBER;
        v->number = strtod(buf, &end);
        if (*end || n == 0) fail(r, "'%s' is not a number", buf);
        v->integer = integral ? strtoll(buf, NULL, 10) : (int64_t)v->number;
    } else {
        fail(r, "unexpected '%c'", ch);
    }
    if (r->failed) {
        mg_json_free(v);
        return NULL;
    }
    return v;
}

mg_json *mg_json_parse(const char *text, size_t len, char *err, size_t errlen) {
    reader r = {text, text + len, text, err, errlen, 0};
    if (errlen) err[0] = '\0';
    mg_json *v = value(&r, 0);
    skip_space(&r);
    if (v && r.at < r.end) {
        fail(&r, "text after the value");
        mg_json_free(v);
        return NULL;
    }
    return v;
}

void mg_json_free(mg_json *v) {
    while (v) {
        mg_json *next = v->next;
        mg_json_free(v->child);
        free(v->string);
        free(v->key);
        free(v);
        v = next;
    }
}

const mg_json *mg_json_get(const mg_json *obj, const char *key) {
    if (!obj || obj->type != MG_JSON_OBJECT) return NULL;
    for (const mg_json *m = obj->child; m; m = m->next)
        if (m->key && strcmp(m->key, key) == 0) return m;
    return NULL;
}

int64_t mg_json_int(const mg_json *obj, const char *key, int64_t dflt) {
    const mg_json *v = mg_json_get(obj, key);
    return v && v->type == MG_JSON_NUMBER ? v->integer : dflt;
}

const char *mg_json_str(const mg_json *obj, const char *key, const char *dflt) {
    const mg_json *v = mg_json_get(obj, key);
    return v && v->type == MG_JSON_STRING ? v->string : dflt;
}
