/* tape.c: recording nodes, and the grad mode (see tape.h; mg_grad_enabled /
 * mg_set_grad_enabled are public). The sequence counter and the mode live in
 * the context (context.h). */
#include "ops/tape.h"

#include <string.h>

#include "context.h"
#include "ops/ops_state.h"
#include "status.h"

mg_node *mg_tape_push(const mg_op_def *def, int n_inputs, mg_dtensor *const *inputs, mg_dtensor *output) {
    mg_context *c = mg_ctx();
    mg_node *n = mg_arena_alloc(mg_step_arena(), sizeof *n);
    if (!n) return NULL;
    memset(n, 0, sizeof *n);
    n->def = def;
    n->n_inputs = n_inputs;
    for (int i = 0; i < n_inputs; i++) n->inputs[i] = inputs[i];
    n->output = output;
    n->seq = c->tape_seq++;
    output->node = n;
    output->requires_grad = 1;
    return n;
}

bool mg_tape_wants_grad(const mg_dtensor *t) {
    return t && (t->node != NULL || t->requires_grad);
}

int mg_grad_enabled(void) { return !mg_ops()->grad_disabled; }

int mg_set_grad_enabled(int on) {
    int was = mg_grad_enabled();
    mg_ops()->grad_disabled = !on;
    return was;
}
