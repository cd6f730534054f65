/* json.c: the JSON reader (see json.h): recursive descent over a stream, one
 * byte of lookahead, one mg_json per value kept. Exports mg_json_reader_init,
 * mg_json_reader_free, mg_json_enter, mg_json_next, mg_json_read,
 * mg_json_skip, mg_json_finish, mg_json_parse, mg_json_free, mg_json_get,
 * mg_json_int, mg_json_str, mg_json_count. */
#include "io/json.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mg_json_reader_init(mg_json_reader *r, FILE *f) {
    memset(r, 0, sizeof *r);
    r->f = f;
    r->line = r->column = 1;
    r->peek = f ? getc_unlocked(f) : EOF;
}

void mg_json_reader_free(mg_json_reader *r) {
    free(r->buf);
    r->buf = NULL;
    r->cap = 0;
}

static void fail(mg_json_reader *r, const char *fmt, ...) {
    if (r->failed) return;
    r->failed = 1;
    int k = snprintf(r->err, sizeof r->err, "line %ld, column %ld: ", r->line, r->column);
    if (k < 0 || (size_t)k >= sizeof r->err) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err + k, sizeof r->err - (size_t)k, fmt, ap);
    va_end(ap);
}

static void advance(mg_json_reader *r) {
    if (r->peek == EOF) return;
    if (r->peek == '\n')
        r->line++, r->column = 1;
    else
        r->column++;
    r->peek = getc_unlocked(r->f);
}

static void skip_space(mg_json_reader *r) {
    while (r->peek == ' ' || r->peek == '\n' || r->peek == '\r' || r->peek == '\t') advance(r);
}

/* One byte onto r->buf at n. */
static int put(mg_json_reader *r, size_t n, char ch) {
    if (n + 1 >= r->cap) {
        if (r->cap >= MG_JSON_MAX_STRING) {
            fail(r, "a string longer than %d bytes", MG_JSON_MAX_STRING);
            return 0;
        }
        size_t cap = r->cap ? 2 * r->cap : 64;
        char *b = realloc(r->buf, cap);
        if (!b) {
            fail(r, "out of memory");
            return 0;
        }
        r->buf = b;
        r->cap = cap;
    }
    r->buf[n] = ch;
    return 1;
}

static int hex_digit(int h) {
    return h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
           : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
}

/* A string at the opening quote into r->buf, escapes undone (\uXXXX above
 * 0x7f, or 0, becomes '?': no NUL inside a string); its length, or -1 on an
 * error. */
static long string(mg_json_reader *r) {
    advance(r); /* the opening quote */
    size_t n = 0;
    for (;;) {
        int ch = r->peek;
        if (ch == EOF) {
            fail(r, "a string is not closed");
            return -1;
        }
        if (ch == '"') break;
        if (ch < 0x20) {
            fail(r, "a control character inside a string");
            return -1;
        }
        advance(r);
        if (ch == '\\') {
            int e = r->peek;
            if (e == EOF) continue; /* "not closed" next */
            advance(r);
            switch (e) {
            case 'n': ch = '\n'; break;
            case 't': ch = '\t'; break;
            case 'r': ch = '\r'; break;
            case 'b': ch = '\b'; break;
            case 'f': ch = '\f'; break;
            case 'u': {
                unsigned v = 0;
                for (int i = 0; i < 4; i++) {
                    int h = hex_digit(r->peek);
                    if (h < 0) {
                        fail(r, "a \\u escape without 4 hex digits");
                        return -1;
                    }
                    v = v * 16 + (unsigned)h;
                    advance(r);
                }
                ch = v > 0 && v < 0x80 ? (int)v : '?';
                break;
            }
            default: ch = e; /* \" \\ \/ */
            }
        }
        if (!put(r, n++, (char)ch)) return -1;
    }
    advance(r); /* the closing quote */
    if (!put(r, n, '\0')) return -1;
    return (long)n;
}

/* The bytes of `word` next (its first byte is the one seen). */
static int literal(mg_json_reader *r, const char *word) {
    for (const char *w = word; *w; w++) {
        if (r->peek != (unsigned char)*w) {
            fail(r, "expected '%s'", word);
            return 0;
        }
        advance(r);
    }
    return 1;
}

static int value(mg_json_reader *r, int depth, mg_json **out);

/* The elements of an array or members of an object, at its opening byte, to
 * `close`; into v (NULL: read past them). */
static int items(mg_json_reader *r, mg_json *v, char close, int depth) {
    advance(r);
    mg_json **tail = v ? &v->child : NULL;
    skip_space(r);
    if (r->peek == close) {
        advance(r);
        return 1;
    }
    for (;;) {
        char *key = NULL;
        skip_space(r);
        if (close == '}') {
            if (r->peek != '"') {
                fail(r, "expected a member's \"key\"");
                return 0;
            }
            long n = string(r);
            if (n < 0) return 0;
            if (v && !(key = malloc((size_t)n + 1))) {
                fail(r, "out of memory");
                return 0;
            }
            if (key) memcpy(key, r->buf, (size_t)n + 1);
            skip_space(r);
            if (r->peek != ':') {
                free(key);
                fail(r, "expected ':' after a key");
                return 0;
            }
            advance(r);
        }
        mg_json *item = NULL;
        if (!value(r, depth + 1, v ? &item : NULL)) {
            free(key);
            return 0;
        }
        if (v) {
            item->key = key;
            *tail = item;
            tail = &item->next;
            v->n++;
        }
        skip_space(r);
        if (r->peek == ',') {
            advance(r);
            continue;
        }
        if (r->peek == close) {
            advance(r);
            return 1;
        }
        fail(r, "expected ',' or '%c'", close);
        return 0;
    }
}

static int number(mg_json_reader *r, mg_json *v) {
    char buf[64];
    size_t n = 0;
    int integral = 1;
    while (r->peek > 0 && n + 1 < sizeof buf && strchr("+-0123456789.eE", r->peek)) {
        integral &= r->peek != '.' && r->peek != 'e' && r->peek != 'E';
        buf[n++] = (char)r->peek;
        advance(r);
    }
    buf[n] = '\0';
    char *end;
    errno = 0;
    double x = strtod(buf, &end);
    if (*end || n == 0) {
        fail(r, "'%s' is not a number", buf);
        return 0;
    }
    if (v) {
        v->type = MG_JSON_NUMBER;
        v->number = x;
        errno = 0; /* a double past int64's range does not convert */
        v->integer = integral ? strtoll(buf, NULL, 10) : x > -9.2e18 && x < 9.2e18 ? (int64_t)x : 0;
        v->exact = integral && errno != ERANGE;
    }
    return 1;
}

/* The next value into *out (out NULL: read past it). */
static int value(mg_json_reader *r, int depth, mg_json **out) {
    skip_space(r);
    if (r->peek == EOF) {
        fail(r, "the text ends where a value was expected");
        return 0;
    }
    if (depth > MG_JSON_MAX_NESTING) {
        fail(r, "nested deeper than %d", MG_JSON_MAX_NESTING);
        return 0;
    }
    mg_json *v = NULL;
    if (out && !(v = calloc(1, sizeof *v))) {
        fail(r, "out of memory");
        return 0;
    }
    int ch = r->peek, ok;
    if (ch == '{' || ch == '[') {
        if (v) v->type = ch == '{' ? MG_JSON_OBJECT : MG_JSON_ARRAY;
        ok = items(r, v, ch == '{' ? '}' : ']', depth);
    } else if (ch == '"') {
        long n = string(r);
        ok = n >= 0;
        if (ok && v) {
            v->type = MG_JSON_STRING;
            if ((v->string = malloc((size_t)n + 1)))
                memcpy(v->string, r->buf, (size_t)n + 1);
            else
                fail(r, "out of memory"), ok = 0;
        }
    } else if (ch == 't' || ch == 'f') {
        ok = literal(r, ch == 't' ? "true" : "false");
        if (v) v->type = MG_JSON_BOOL, v->number = v->integer = ch == 't';
    } else if (ch == 'n') {
        ok = literal(r, "null");
    } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
        ok = number(r, v);
    } else {
        fail(r, ch >= 0x20 && ch < 0x7f ? "unexpected '%c'" : "unexpected byte 0x%02x", ch);
        ok = 0;
    }
    if (!ok) {
        mg_json_free(v);
        return 0;
    }
    if (out) *out = v;
    return 1;
}

int mg_json_enter(mg_json_reader *r, char open) {
    skip_space(r);
    if (r->failed) return 0;
    if (r->depth == MG_JSON_MAX_NESTING) {
        fail(r, "nested deeper than %d", MG_JSON_MAX_NESTING);
        return 0;
    }
    if (r->peek != (unsigned char)open) {
        fail(r, "expected %s", open == '{' ? "an object '{'" : "an array '['");
        return 0;
    }
    advance(r);
    r->open[r->depth] = open;
    r->first[r->depth] = 1;
    r->depth++;
    return 1;
}

int mg_json_next(mg_json_reader *r, char *key, size_t keylen) {
    if (r->failed || r->depth == 0) return -1;
    int top = r->depth - 1;
    char close = r->open[top] == '{' ? '}' : ']';
    skip_space(r);
    if (r->peek == close) {
        advance(r);
        r->depth--;
        return 0;
    }
    if (!r->first[top]) {
        if (r->peek != ',') {
            fail(r, "expected ',' or '%c'", close);
            return -1;
        }
        advance(r);
        skip_space(r);
    }
    r->first[top] = 0;
    if (close == '}') {
        if (r->peek != '"') {
            fail(r, "expected a member's \"key\"");
            return -1;
        }
        if (string(r) < 0) return -1;
        if (key && keylen) snprintf(key, keylen, "%s", r->buf);
        skip_space(r);
        if (r->peek != ':') {
            fail(r, "expected ':' after a key");
            return -1;
        }
        advance(r);
    }
    return 1;
}

mg_json *mg_json_read(mg_json_reader *r) {
    mg_json *v = NULL;
    return !r->failed && value(r, r->depth, &v) ? v : NULL;
}

int mg_json_skip(mg_json_reader *r) { return !r->failed && value(r, r->depth, NULL); }

int mg_json_finish(mg_json_reader *r) {
    skip_space(r);
    if (!r->failed && r->peek != EOF) fail(r, "text after the value");
    return !r->failed;
}

mg_json *mg_json_parse(const char *text, size_t len, char *err, size_t errlen) {
    if (errlen) err[0] = '\0';
    FILE *f = len ? fmemopen((void *)text, len, "r") : NULL;
    if (len && !f) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    mg_json_reader r;
    mg_json_reader_init(&r, f);
    mg_json *v = mg_json_read(&r);
    if (v && !mg_json_finish(&r)) {
        mg_json_free(v);
        v = NULL;
    }
    if (!v && errlen) snprintf(err, errlen, "%s", r.err);
    mg_json_reader_free(&r);
    if (f) fclose(f);
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

int mg_json_count(const mg_json *v, int64_t *out) {
    if (!v || v->type != MG_JSON_NUMBER || !v->exact || v->integer < 0) return 0;
    *out = v->integer;
    return 1;
}

const char *mg_json_str(const mg_json *obj, const char *key, const char *dflt) {
    const mg_json *v = mg_json_get(obj, key);
    return v && v->type == MG_JSON_STRING ? v->string : dflt;
}
