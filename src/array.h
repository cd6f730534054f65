/* array.h: two small helpers for plain C arrays that every layer uses: growing
 * one (its capacity doubles), and finding a name in a table of names.
 * Exports: mg_array_grow, mg_name_find, mg_name_parse. */
#ifndef MG_ARRAY_H
#define MG_ARRAY_H

#include <stddef.h>

/* *items (capacity *cap elements of `size` bytes) made to hold at least `need`:
 * realloc'd to double (at least 16) when it is too small. MG_OK, or MG_ENOMEM
 * with a message naming `what` (the array is left as it was). */
int mg_array_grow(void **items, int *cap, int need, size_t size, const char *what);
/* The index of `text` in names[0..n), or -1. */
int mg_name_find(const char *text, const char *const *names, int n);
/* *index = the index of `text` in names[0..n) and MG_OK; else MG_EINVAL with the
 * message "unknown WHAT 'TEXT'; use A, B or C" (*index untouched). */
int mg_name_parse(const char *text, const char *const *names, int n, const char *what, int *index);

#endif
