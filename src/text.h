/* text.h: text that comes from a file (a checkpoint's attributes and dataset
 * names, a data set's source, a flight recorder dump, a message quoting any of
 * them) made safe to print on a terminal. Such text may hold control bytes
 * that clear the screen, move the cursor or rewrite a line already printed
 * ("\r\e[K" and a fake "checksums: all verify"): every byte below 0x20, DEL,
 * the C1 controls (U+0080..U+009F, which some terminals obey), the
 * bidirectional overrides (U+202A..U+202E, U+2066..U+2069) and every byte that
 * is not part of valid UTF-8 are printed as \xNN (\n, \r, \t and \e as such);
 * the rest, printable ASCII and valid UTF-8, as it is.
 * Exports mg_text_safe, mg_text_fputs, mg_text_is_safe. */
#ifndef MG_TEXT_H
#define MG_TEXT_H

#include <stddef.h>
#include <stdio.h>

/* s made safe into buf (len bytes, at least 4), cut with "..." where it does
 * not fit; returns buf. s NULL gives "(null)". */
char *mg_text_safe(const char *s, char *buf, size_t len);
/* Writes s made safe to out; returns what fputs returns for its last piece
 * (EOF on a failed write). */
int mg_text_fputs(const char *s, FILE *out);
/* 1 when s prints as it is (nothing to escape). */
int mg_text_is_safe(const char *s);

#endif
