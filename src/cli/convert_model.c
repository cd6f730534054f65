/* convert_model.c: a model held whole in host memory (convert.h's
 * mg_host_model), which the formats' readers fill and their writers read, and
 * `ckpt export` and `ckpt import` move to and from a checkpoint; below all of
 * them, so each format's file calls down to it, never back into ckpt_convert.c.
 * Exports mg_host_model_alloc, mg_host_model_free (convert.h). */
#include <stdlib.h>
#include <string.h>

#include "cli/convert.h"
#include "status.h"

int mg_host_model_alloc(mg_host_model *m, const mg_arch *a) {
    memset(m, 0, sizeof *m);
    m->arch = *a;
    m->n = mg_arch_param_count(a);
    if (!(m->p = calloc((size_t)m->n, sizeof *m->p)))
        return mg_error(MG_ENOMEM, "out of memory for %d parameters", m->n);
    for (int k = 0; k < m->n; k++) {
        mg_arch_param_desc d;
        mg_arch_param(a, k, &d);
        int64_t numel = d.ndim == 2 ? d.shape[0] * d.shape[1] : d.shape[0];
        if (!(m->p[k] = malloc(sizeof(float) * (size_t)numel + 1)))
            return mg_error(MG_ENOMEM, "out of memory for %s (%lld values)", d.name,
                            (long long)numel);
    }
    return MG_OK;
}

void mg_host_model_free(mg_host_model *m) {
    for (int k = 0; m->p && k < m->n; k++) free(m->p[k]);
    free(m->p);
    m->p = NULL;
}
