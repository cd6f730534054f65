/* tape.c: the list of recorded nodes of this step and the grad mode
 * (see tape.h; mg_grad_enabled / mg_set_grad_enabled are public). */
#include "autograd/tape.h"

#include <string.h>

#include "arena.h"
#include "status.h"

static mg_node *last_node;
static int64_t next_seq;
static int grad_enabled = 1;

mg_node *mg_tape_push(int op, int n_inputs, mg_dtensor *const *inputs, mg_dtensor *output) {
    mg_node *n = mg_arena_alloc(mg_step_arena(), sizeof *n);
    if (!n) return NULL;
    memset(n, 0, sizeof *n);
    n->op = op;
    n->n_inputs = n_inputs;
    for (int i = 0; i < n_inputs; i++) n->inputs[i] = inputs[i];
    n->output = output;
    n->prev = last_node;
    n->seq = next_seq++;
    last_node = n;
    output->node = n;
    output->requires_grad = 1;
    return n;
}

mg_node *mg_tape_last(void) { return last_node; }

void mg_tape_clear(void) { last_node = NULL; }

bool mg_tape_wants_grad(const mg_dtensor *t) {
    return t && (t->node != NULL || t->requires_grad);
}

int mg_grad_enabled(void) { return grad_enabled; }

int mg_set_grad_enabled(int on) {
    int was = grad_enabled;
    grad_enabled = on ? 1 : 0;
    return was;
}
