/* test_pipeline_cost.c: the cost model of pipeline plans (src/nn/pipeline_cost.c):
 * the MLP's layer FLOPs and bytes against a hand count; the balanced split
 * against brute force over every contiguous cut (random layer costs), its
 * tie rule, tied layers (an embedding with the first block, a head with the
 * last), the refusals (more stages than layers, virtual stages that do not
 * divide the layers, --pp-layers that do not fit); and the per-stage costs
 * (times at a FLOP rate, bytes, rows split over data-parallel ranks, the
 * reduce-grad all-reduce). Serial. */
#include <stdio.h>
#include <string.h>

#include "meshgrad.h"
#include "nn/pipeline_cost.h"
#include "status.h"
#include "testutil.h"

START_TEST(mlp_layer_costs) {
    int64_t w[] = {8, 16, 4};
    mg_layer_cost l[2];
    ck_assert(mg_layer_costs_mlp(w, 3, l) == MG_OK);
    /* fc1: Linear(8, 16) + ReLU; its input is data: no input gradient GEMM */
    ck_assert_str_eq(l[0].name, "fc1");
    ck_assert(l[0].forward_flops == 2 * 8 * 16 + 16 + 16);
    ck_assert(l[0].backward_input_flops == 16);
    ck_assert(l[0].backward_weight_flops == 2 * 8 * 16 + 16);
    ck_assert(l[0].saved_floats == 8 + 16 && l[0].out_floats == 16 && l[0].params == 8 * 16 + 16);
    /* fc2: Linear(16, 4) + the loss, which keeps the prediction and the target */
    ck_assert(l[1].backward_input_flops == 2 * 16 * 4 + 4);
    ck_assert(l[1].saved_floats == 16 + 2 * 4 && l[1].out_floats == 4);
    ck_assert(mg_layer_costs_mlp(w, 1, l) == MG_EINVAL);
    int64_t bad[] = {8, 0};
    ck_assert(mg_layer_costs_mlp(bad, 2, l) == MG_EINVAL);
    ck_assert_msg(strstr(mg_last_error(), "width 1 is 0"), "%s", mg_last_error());
}
END_TEST

static void flops_layers(mg_layer_cost *l, const double *f, int n) {
    memset(l, 0, (size_t)n * sizeof *l);
    for (int i = 0; i < n; i++) {
        snprintf(l[i].name, sizeof l[i].name, "l%d", i);
        l[i].forward_flops = f[i];
    }
}

/* The smallest largest stage over every cut of n layers into s stages. */
static double brute(const double *f, int n, int s, int from) {
    if (s == 1) {
        double t = 0;
        for (int i = from; i < n; i++) t += f[i];
        return t;
    }
    double best = 1e300, first = 0;
    for (int end = from + 1; end <= n - (s - 1); end++) {
        first += f[end - 1];
        double rest = brute(f, n, s - 1, end), m = first > rest ? first : rest;
        if (m < best) best = m;
    }
    return best;
}

START_TEST(balance_is_optimal) {
    uint64_t seed = 7;
    mg_layer_cost l[10];
    double f[10];
    mg_pp_split sp;
    int cases = 0;
    for (int trial = 0; trial < 60; trial++)
        for (int n = 1; n <= 10; n++) {
            for (int i = 0; i < n; i++) f[i] = 1 + (double)(mg_test_next(&seed) % 100);
            flops_layers(l, f, n);
            for (int s = 1; s <= n; s++) {
                ck_assert_msg(mg_pp_split_make(&sp, l, n, s, 1, NULL, 0) == MG_OK, "%s",
                              mg_last_error());
                double worst = 0;
                for (int st = 0; st < s; st++) {
                    double t = 0;
                    ck_assert(sp.first[st] < sp.first[st + 1]);
                    for (int i = sp.first[st]; i < sp.first[st + 1]; i++) t += f[i];
                    worst = t > worst ? t : worst;
                }
                ck_assert_int_eq(sp.first[0], 0);
                ck_assert_int_eq(sp.first[s], n);
                ck_assert_msg(worst == brute(f, n, s, 0), "n=%d s=%d: largest stage %g, best %g", n,
                              s, worst, brute(f, n, s, 0));
                cases++;
            }
        }
    printf("balanced splits: %d equal to brute force\n", cases);
    /* equal layers, one too many: the last stage takes the extra */
    double eq[5] = {1, 1, 1, 1, 1};
    flops_layers(l, eq, 5);
    ck_assert(mg_pp_split_make(&sp, l, 5, 4, 1, NULL, 0) == MG_OK);
    int want[5] = {0, 1, 2, 3, 5};
    for (int s = 0; s <= 4; s++) ck_assert_int_eq(sp.first[s], want[s]);
}
END_TEST

START_TEST(tied_layers_and_counts) {
    /* embedding, 3 blocks, head: 3 units */
    double f[5] = {1, 10, 10, 10, 1};
    mg_layer_cost l[5];
    flops_layers(l, f, 5);
    l[0].tie = MG_LAYER_WITH_NEXT;
    l[4].tie = MG_LAYER_WITH_PREV;
    mg_pp_split sp;
    ck_assert(mg_pp_split_make(&sp, l, 5, 3, 1, NULL, 0) == MG_OK);
    ck_assert_int_eq(sp.units, 3);
    ck_assert(sp.first[1] == 2 && sp.first[2] == 3 && sp.first[3] == 5);
    ck_assert(mg_pp_split_make(&sp, l, 5, 4, 1, NULL, 0) == MG_EINVAL);
    ck_assert_msg(strstr(mg_last_error(), "4 pipeline stages need at least one layer each, but the "
                                          "model has 3 layers"), "%s", mg_last_error());
    /* --pp-layers counts units */
    int counts[2] = {1, 2};
    ck_assert(mg_pp_split_make(&sp, l, 5, 2, 1, counts, 2) == MG_OK);
    ck_assert(sp.first[1] == 2 && sp.first[2] == 5);
    int sum_wrong[2] = {1, 1}, zero[2] = {0, 3};
    ck_assert(mg_pp_split_make(&sp, l, 5, 2, 1, sum_wrong, 2) == MG_EINVAL);
    ck_assert_msg(strstr(mg_last_error(), "sums to 2 layers but the model has 3"), "%s",
                  mg_last_error());
    ck_assert(mg_pp_split_make(&sp, l, 5, 2, 1, zero, 2) == MG_EINVAL);
    ck_assert(mg_pp_split_make(&sp, l, 5, 3, 1, counts, 2) == MG_EINVAL);
    ck_assert_msg(strstr(mg_last_error(), "has 2 entries but there are 3 pipeline stages"), "%s",
                  mg_last_error());
    /* interleaved: ranks x v stages must divide the layers when balanced */
    double g[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    mg_layer_cost m[8];
    flops_layers(m, g, 8);
    ck_assert(mg_pp_split_make(&sp, m, 8, 2, 2, NULL, 0) == MG_OK);
    for (int s = 0; s <= 4; s++) ck_assert_int_eq(sp.first[s], 2 * s);
    ck_assert(mg_pp_split_make(&sp, m, 6, 2, 2, NULL, 0) == MG_EINVAL);
    ck_assert_msg(strstr(mg_last_error(), "2 ranks x 2 virtual stages = 4 stages do not divide the "
                                          "model's 6 layers"), "%s", mg_last_error());
    int four[4] = {2, 1, 2, 1};
    ck_assert(mg_pp_split_make(&sp, m, 6, 2, 2, four, 4) == MG_OK);
}
END_TEST

START_TEST(stage_costs) {
    int64_t w[] = {8, 16, 16, 4};
    mg_layer_cost l[3];
    ck_assert(mg_layer_costs_mlp(w, 4, l) == MG_OK);
    int counts[2] = {1, 2};
    mg_pp_split sp;
    ck_assert(mg_pp_split_make(&sp, l, 3, 2, 1, counts, 2) == MG_OK);
    mg_pp_machine m = {.flops = 1e9, .latency = 1e-5, .bandwidth = 1e9, .dp = 2};
    int64_t rows[3] = {5, 5, 2};
    mg_pp_stage_costs c;
    ck_assert(mg_pp_stage_costs_make(&c, l, &sp, &m, rows, 3) == MG_OK);
    /* each data-parallel rank gets the larger torch.chunk piece: 3, 3, 1 */
    ck_assert(c.rows[0] == 3 && c.rows[1] == 3 && c.rows[2] == 1);
    ck_assert(fabs(c.forward[1] - (l[1].forward_flops + l[2].forward_flops) / 1e9) < 1e-18);
    ck_assert(fabs(c.backward_weight[0] - l[0].backward_weight_flops / 1e9) < 1e-18);
    ck_assert(c.act_bytes[0] == 4.0 * 16 && c.act_bytes[1] == 4.0 * 4);
    ck_assert(c.saved_bytes[1] == 4.0 * (l[1].saved_floats + l[2].saved_floats));
    double pb = 4.0 * (l[1].params + l[2].params);
    ck_assert(c.param_bytes[1] == pb);
    /* a ring all-reduce over 2 ranks sends (2 - 1) / 2 * 2 of the bytes */
    ck_assert(fabs(c.reduce[1] - (1e-5 + pb / 1e9)) < 1e-15);
    /* one transfer of micro-batch 0's output of stage 0: 3 rows x 64 bytes */
    mg_pp_action a = {.op = MG_PP_SEND_ACT, .stage = 0, .peer = 1, .mb = 0};
    ck_assert(fabs(mg_pp_action_time(&c.cost, &a) - (1e-5 + 3 * 64 / 1e9)) < 1e-15);
    mg_pp_stage_costs_free(&c);
    m.dp = 1;
    ck_assert(mg_pp_stage_costs_make(&c, l, &sp, &m, rows, 3) == MG_OK);
    ck_assert(c.rows[0] == 5 && c.reduce[0] == 0 && c.reduce[1] == 0);
    mg_pp_stage_costs_free(&c);
}
END_TEST

int main(void) {
    const TTest *tests[] = {mlp_layer_costs, balance_is_optimal, tied_layers_and_counts,
                            stage_costs, NULL};
    return mg_test_run(mg_test_suite("pipeline_cost", tests));
}
