/* array.c: growing arrays and finding names (see array.h). */
#include "array.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

int mg_array_grow(void **items, int *cap, int need, size_t size, const char *what) {
    if (need <= *cap) return MG_OK;
    int c = *cap > 0 ? *cap : 16;
    while (c < need) c *= 2;
    void *p = realloc(*items, (size_t)c * size);
    if (!p) return mg_error(MG_ENOMEM, "%s: out of memory for %d entries", what, c);
    *items = p;
    *cap = c;
    return MG_OK;
}

int mg_name_find(const char *text, const char *const *names, int n) {
    for (int i = 0; text && i < n; i++)
        if (strcmp(text, names[i]) == 0) return i;
    return -1;
}

int mg_name_parse(const char *text, const char *const *names, int n, const char *what, int *index) {
    int k = mg_name_find(text, names, n);
    if (k >= 0) {
        *index = k;
        return MG_OK;
    }
    char list[256] = "";
    for (int i = 0; i < n; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
                 i == 0 ? "" : i == n - 1 ? " or " : ", ", names[i]);
    return mg_error(MG_EINVAL, "unknown %s '%s'; use %s", what, text ? text : "", list);
}
