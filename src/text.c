/* text.c: text from files made safe to print (see text.h). Exports
 * mg_text_safe, mg_text_fputs, mg_text_is_safe. */
#include "text.h"

#include <string.h>

/* The length of the valid UTF-8 sequence at s that may print as it is (1 for
 * printable ASCII), or 0 when its first byte must be escaped. */
static size_t printable(const unsigned char *s) {
    unsigned c = s[0];
    if (c >= 0x20 && c < 0x7f) return 1;
    if (c < 0xc2 || c > 0xf4) return 0; /* controls, DEL, stray continuations, overlongs */
    size_t n = c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80) return 0; /* cut short (the NUL included) */
    unsigned c1 = s[1];
    if (c == 0xc2 && c1 < 0xa0) return 0;                       /* C1 controls */
    if (c == 0xe0 && c1 < 0xa0) return 0;                       /* overlong */
    if (c == 0xed && c1 >= 0xa0) return 0;                      /* surrogates */
    if (c == 0xf0 && c1 < 0x90) return 0;                       /* overlong */
    if (c == 0xf4 && c1 >= 0x90) return 0;                      /* past U+10FFFF */
    if (c == 0xe2 && c1 == 0x80 && s[2] >= 0xaa && s[2] <= 0xae) return 0; /* U+202A..E */
    if (c == 0xe2 && c1 == 0x81 && s[2] >= 0xa6 && s[2] <= 0xa9) return 0; /* U+2066..9 */
    return n;
}

/* The escape of byte c into out (at most 5 bytes with the NUL). */
static void escape(unsigned char c, char out[5]) {
    static const char hex[] = "0123456789abcdef";
    const char *named = c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t"
                        : c == 0x1b ? "\\e" : NULL;
    if (named) {
        memcpy(out, named, 3);
        return;
    }
    out[0] = '\\', out[1] = 'x', out[2] = hex[c >> 4], out[3] = hex[c & 15], out[4] = '\0';
}

/* The bytes s takes once made safe. */
static size_t safe_length(const unsigned char *p) {
    size_t total = 0;
    while (*p) {
        size_t n = printable(p);
        char esc[5];
        if (n == 0) escape(*p, esc);
        total += n ? n : strlen(esc);
        p += n ? n : 1;
    }
    return total;
}

char *mg_text_safe(const char *s, char *buf, size_t len) {
    if (len < 4) {
        if (len) buf[0] = '\0';
        return buf;
    }
    if (!s) s = "(null)";
    const unsigned char *p = (const unsigned char *)s;
    /* all of it when it fits; else whole pieces while "..." still fits after them */
    size_t room = safe_length(p) < len ? len - 1 : len - 4, used = 0;
    while (*p) {
        char esc[5];
        size_t n = printable(p);
        if (n == 0) escape(*p, esc);
        size_t k = n ? n : strlen(esc);
        if (used + k > room) break;
        memcpy(buf + used, n ? (const char *)p : esc, k);
        used += k;
        p += n ? n : 1;
    }
    if (*p) memcpy(buf + used, "...", 3), used += 3;
    buf[used] = '\0';
    return buf;
}

int mg_text_fputs(const char *s, FILE *out) {
    if (!s) s = "(null)";
    const unsigned char *p = (const unsigned char *)s;
    int rc = 0;
    while (*p && rc != EOF) {
        const unsigned char *run = p; /* the longest run that prints as it is */
        size_t n;
        while (*p && (n = printable(p)) > 0) p += n;
        if (p > run) rc = fwrite(run, 1, (size_t)(p - run), out) == (size_t)(p - run) ? 0 : EOF;
        if (*p && rc != EOF) {
            char esc[5];
            escape(*p++, esc);
            rc = fputs(esc, out);
        }
    }
    return rc;
}

int mg_text_is_safe(const char *s) {
    if (!s) return 1;
    const unsigned char *p = (const unsigned char *)s;
    size_t n;
    while (*p && (n = printable(p)) > 0) p += n;
    return *p == '\0';
}
