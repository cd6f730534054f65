/* train_gpt.c: a GPT trained on a token data set, in one file, against the
 * installed headers only (meshgrad.h, meshgrad_train.h), in the spirit of
 * llm.c's train_gpt2.c.
 *
 * The model is GPT-2's: token and learned position embeddings, L pre-LayerNorm
 * blocks (causal self-attention with H heads, then a GELU MLP of width 4C), a
 * final LayerNorm and an output head tied to the token embedding, with
 * GPT-2's init. Data parallel over every rank: each batch is split on its
 * batch dim (Shard(0)), every parameter is replicated, and meshgrad sums the
 * gradients. A step adds up A micro-batches (the ranks sum only after the
 * last), clips the gradients by global norm and takes an AdamW step at the
 * learning rate of a cosine schedule with warmup. The validation loss (the
 * mean over the non-overlapping windows of /val) is printed every few steps,
 * and the run ends with a checkpoint in the format of `meshgrad train
 * --model gpt` (`meshgrad ckpt info` reads it, `meshgrad generate` samples
 * from it; -r resumes from one, on any number of ranks). To see inside the
 * run: -f DIR has every rank's flight recorder dump its last collectives to
 * DIR on kill -USR2, a crash or a collective stalled past
 * MG_COLLECTIVE_TIMEOUT seconds (`meshgrad trace analyze DIR` reads them),
 * and -t FILE writes a timeline of steps -S A:B for Perfetto
 * (ui.perfetto.dev) or chrome://tracing.
 *
 * After `make install`, in the checkout (make builds build/data/mobydick.h5):
 *   mpicc -O2 examples/train_gpt.c $(pkg-config --cflags --libs meshgrad) -lm \
 *       -Wl,-rpath,$(pkg-config --variable=libdir meshgrad) -o train_gpt
 *   mpirun -np 2 ./train_gpt -d build/data/mobydick.h5 -o gpt.h5
 * Options (the defaults are the recipe of data/mobydick.conf):
 *   -d data (data/mobydick.h5)  -L layers (4)   -H heads (4)    -C embd (128)
 *   -T ctx (64)     -B batch (32)     -A micro-batches per step (1)
 *   -n steps (1000) -l lr (1e-3)      -m lr_min (1e-4)  -w warmup (50)
 *   -c clip (1.0)   -e eval every (100 steps; 0: at the end only)
 *   -V val windows (0: all)   -s seed (1337)   -o checkpoint out   -r resume from
 *   -f flight recorder dump dir   -t trace file   -S trace steps A:B (2:4, from 1)
 *   -R 1: recompute each block in backward (mg_recompute: its activations given
 *         back after its forward; the same gradients, bit for bit, for less memory) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <meshgrad.h>
#include <meshgrad_train.h>

typedef struct {
    const char *data, *out, *resume, *flight_dir, *trace;
    int L, H, C, T, B, A, eval_every, val_windows, recompute;
    long steps, warmup, seed, trace_first, trace_last;
    double lr, lr_min, clip;
} config;

static void die(const char *what) {
    if (mg_rank() == 0) fprintf(stderr, "train_gpt: %s: %s\n", what, mg_last_error());
    mg_finalize();
    exit(1);
}
#define CHECK(call) do { if ((call) != MG_OK) die(#call); } while (0)

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- the model ------------------------------------------------------------------ */

/* Each block's parameters, named as `meshgrad train --model gpt` names them,
 * so that its checkpoints and this program's are one format (`meshgrad
 * generate` and `train --resume` read either); PROJ and FC2 are the residual
 * projections, whose init is scaled by 1/sqrt(2L). */
enum { LN1W, LN1B, QKVW, QKVB, PROJW, PROJB, LN2W, LN2B, FCW, FCB, FC2W, FC2B, NBLOCK };
static const char *const block_names[NBLOCK] = {
    "ln1.weight", "ln1.bias", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight",
    "attn.proj.bias", "ln2.weight", "ln2.bias", "mlp.fc.weight", "mlp.fc.bias",
    "mlp.fc2.weight", "mlp.fc2.bias"};

typedef struct {
    int L, H, C, T, V;
    int n;             // parameters: wte, wpe, L blocks of NBLOCK, ln_f.weight, ln_f.bias
    mg_dtensor **p;    // each Replicate on the 1-D mesh
    char (*name)[64];
    const mg_mesh *mesh;
    int recompute;     // each block run through mg_recompute
} GPT;

static mg_dtensor **block(GPT *m, int l) { return m->p + 2 + NBLOCK * l; }

/* N(0, 1) from a splitmix64 stream: the same numbers on every rank */
static uint64_t rng_state;
static double randn(void) {
    double u[2];
    for (int i = 0; i < 2; i++) {
        uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        u[i] = ((z ^ (z >> 31)) >> 11) * (1.0 / 9007199254740992.0);
    }
    return sqrt(-2 * log(1 - u[0])) * cos(2 * 3.14159265358979323846 * u[1]);
}

/* A parameter of shape (d0) or (d0, d1): N(0, std), or `fill` when std is 0. */
static void add_param(GPT *m, const char *name, int64_t d0, int64_t d1, double std, float fill) {
    int64_t shape[2] = {d0, d1};
    mg_tensor *full = mg_tensor_new(d1 ? 2 : 1, shape);
    if (!full) die(name);
    float *v = mg_tensor_data(full);
    for (int64_t i = 0; i < mg_tensor_numel(full); i++) v[i] = std ? (float)(std * randn()) : fill;
    mg_placement rep = MG_REPLICATE;
    mg_dtensor *p = mg_distribute(m->mesh, full, &rep, 1);
    mg_tensor_free(full);
    if (!p || mg_set_requires_grad(p, 1) != MG_OK) die(name);
    snprintf(m->name[m->n], sizeof m->name[0], "%s", name);
    m->p[m->n++] = p;
}

static void gpt_init(GPT *m, const mg_mesh *mesh, int L, int H, int C, int T, int V, long seed,
                     int recompute) {
    *m = (GPT){L, H, C, T, V, 0, calloc(4 + NBLOCK * L, sizeof(mg_dtensor *)),
               calloc(4 + NBLOCK * L, sizeof m->name[0]), mesh, recompute};
    rng_state = (uint64_t)seed;
    double std = 0.02, resid = 0.02 / sqrt(2.0 * L);
    add_param(m, "wte", V, C, std, 0);  // wte: (V, C), also the output head
    add_param(m, "wpe", T, C, std, 0);  // wpe: (T, C)
    for (int l = 0; l < L; l++) {
        char name[64];
        int64_t shape[NBLOCK][2] = {{C}, {C}, {3 * C, C}, {3 * C}, {C, C}, {C},
                                    {C}, {C}, {4 * C, C}, {4 * C}, {C, 4 * C}, {C}};
        for (int k = 0; k < NBLOCK; k++) {
            snprintf(name, sizeof name, "h.%d.%s", l, block_names[k]);
            int weight = shape[k][1] != 0, ln_weight = k == LN1W || k == LN2W;
            add_param(m, name, shape[k][0], shape[k][1],
                      weight ? (k == PROJW || k == FC2W ? resid : std) : 0, ln_weight ? 1 : 0);
        }
    }
    add_param(m, "ln_f.weight", C, 0, 0, 1);
    add_param(m, "ln_f.bias", C, 0, 0, 0);
}

/* Block l of x (B, T, C), as a function of x for mg_recompute. */
typedef struct {
    GPT *m;
    int l;
    int64_t B;
} block_args;

static mg_dtensor *block_forward(void *ctx, const mg_dtensor *x) {
    const block_args *b = ctx;
    int64_t B = b->B, T = b->m->T, C = b->m->C, H = b->m->H, D = C / H;
    mg_dtensor **w = block(b->m, b->l);
    mg_dtensor *qkv = mg_linear(mg_layer_norm(x, w[LN1W], w[LN1B], 1e-5f), w[QKVW], w[QKVB]);
    // qkv: (B, T, 3C), its rows per head (H, 3, D): q, k and v of a head together,
    // so that splitting the rows over ranks (tensor parallel) splits whole heads
    mg_dtensor *heads = mg_reshape(qkv, 4, (int64_t[]){B, T, H, 3 * D});
    mg_dtensor *qkvh[3]; // q, k, v: (B, H, T, D)
    for (int s = 0; s < 3; s++)
        qkvh[s] = mg_permute(mg_narrow(heads, 3, s * D, D), (int[]){0, 2, 1, 3});
    mg_dtensor *a = mg_attention(qkvh[0], qkvh[1], qkvh[2], 1); // a: (B, H, T, D)
    a = mg_reshape(mg_permute(a, (int[]){0, 2, 1, 3}), 3, (int64_t[]){B, T, C});
    mg_dtensor *r = mg_add(x, mg_linear(a, w[PROJW], w[PROJB]));
    mg_dtensor *h = mg_gelu(mg_linear(mg_layer_norm(r, w[LN2W], w[LN2B], 1e-5f), w[FCW], w[FCB]));
    return mg_add(r, mg_linear(h, w[FC2W], w[FC2B])); // h: (B, T, 4C)
}

/* The mean cross-entropy of predicting targets from ids, both (B, T). */
static mg_dtensor *gpt_loss(GPT *m, mg_dtensor *ids, mg_dtensor *targets, int64_t B) {
    mg_dtensor **p = m->p;
    mg_dtensor *x = mg_add(mg_embedding(ids, p[0]), p[1]); // x: (B, T, C)
    for (int l = 0; l < m->L; l++) {
        block_args b = {m, l, B};
        x = m->recompute ? mg_recompute(block_forward, &b, sizeof b, x) : block_forward(&b, x);
    }
    mg_dtensor *lnf = mg_layer_norm(x, p[m->n - 2], p[m->n - 1], 1e-5f);
    mg_dtensor *logits = mg_linear(lnf, p[0], NULL); // logits: (B, T, V), head tied to wte
    mg_dtensor *loss = mg_cross_entropy(logits, targets);
    if (!loss) die("forward");
    return loss;
}

static double value(const mg_dtensor *scalar) { // collective
    mg_tensor *full = mg_full_tensor(scalar);
    if (!full) die("reading a value");
    double v = mg_tensor_data(full)[0];
    mg_tensor_free(full);
    return v;
}

/* The mean loss over the first `windows` evaluation windows of the split, in
 * batches of B windows (the last may be smaller), without autograd. */
static double eval_loss(GPT *m, mg_token_loader *val, int64_t windows, int64_t B) {
    mg_placement batch = MG_SHARD(0);
    int was = mg_set_grad_enabled(0);
    double sum = 0;
    for (int64_t first = 0; first < windows; first += B) {
        int64_t n = windows - first < B ? windows - first : B;
        mg_dtensor *x, *y;
        CHECK(mg_token_loader_eval_batch(val, first, n, m->T, &batch, 1, &x, &y));
        sum += value(gpt_loss(m, x, y, n)) * n;
        mg_step_end();
    }
    mg_set_grad_enabled(was);
    return sum / windows;
}

/* ---- the command line ---------------------------------------------------------------- */

static void usage(void) {
    if (mg_rank() == 0)
        fprintf(stderr, "usage: train_gpt [-d data.h5] [-L layers] [-H heads] [-C embd] [-T ctx] "
                "[-B batch] [-A micro-batches] [-n steps] [-l lr] [-m lr_min] [-w warmup] "
                "[-c clip] [-e eval_every] [-V val_windows] [-s seed] [-o out.h5] [-r resume.h5] "
                "[-f flight_dir] [-t trace.json] [-S first:last] [-R 0|1]\n");
    mg_finalize();
    exit(2);
}

static config parse(int argc, char **argv) {
    config c = {"data/mobydick.h5", NULL, NULL, NULL, NULL, 4, 4, 128, 64, 32, 1, 100, 0, 0,
                1000, 50, 1337, 2, 4, 1e-3, 1e-4, 1.0};
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc || argv[i][0] != '-' || strlen(argv[i]) != 2) usage();
        const char *v = argv[i + 1];
        switch (argv[i][1]) {
        case 'd': c.data = v; break;
        case 'o': c.out = v; break;
        case 'r': c.resume = v; break;
        case 'L': c.L = atoi(v); break;
        case 'H': c.H = atoi(v); break;
        case 'C': c.C = atoi(v); break;
        case 'T': c.T = atoi(v); break;
        case 'B': c.B = atoi(v); break;
        case 'A': c.A = atoi(v); break;
        case 'e': c.eval_every = atoi(v); break;
        case 'V': c.val_windows = atoi(v); break;
        case 'n': c.steps = atol(v); break;
        case 's': c.seed = atol(v); break;
        case 'l': c.lr = atof(v); break;
        case 'm': c.lr_min = atof(v); break;
        case 'w': c.warmup = atol(v); break;
        case 'c': c.clip = atof(v); break;
        case 'f': c.flight_dir = v; break;
        case 't': c.trace = v; break;
        case 'S':
            if (sscanf(v, "%ld:%ld", &c.trace_first, &c.trace_last) != 2) usage();
            break;
        case 'R': c.recompute = atoi(v); break;
        default: usage();
        }
    }
    if (c.L < 1 || c.H < 1 || c.C < 1 || c.C % c.H || c.T < 1 || c.B < 1 || c.A < 1 ||
        c.steps < 1 || c.warmup < 0 || c.eval_every < 0 || c.val_windows < 0 || c.clip <= 0 ||
        c.trace_first < 1 || c.trace_last < c.trace_first ||
        (c.recompute != 0 && c.recompute != 1)) {
        if (mg_rank() == 0) fprintf(stderr, "train_gpt: sizes must be >= 1, heads must divide embd\n");
        usage();
    }
    return c;
}

/* ---- training ---------------------------------------------------------------------------- */

int main(int argc, char **argv) {
    if (mg_init(&argc, &argv) != MG_OK) die("mg_init");
    config c = parse(argc, argv);
    int ranks = mg_world_size(), rank = mg_rank();
    mg_mesh *mesh = mg_mesh_new(1, &ranks); // data parallel over every rank
    if (!mesh) die("mg_mesh_new");
    // what every rank did last goes to -f DIR on kill -USR2, a crash or a stalled collective
    if (c.flight_dir) CHECK(mg_flight_recorder_set_dir(c.flight_dir));
    mg_token_loader *train = mg_token_loader_open(mesh, c.data, "train");
    mg_token_loader *val = mg_token_loader_open(mesh, c.data, "val");
    if (!train || !val) die(c.data);
    int64_t windows = mg_token_loader_eval_windows(val, c.T);
    if (c.val_windows > 0 && c.val_windows < windows) windows = c.val_windows;

    GPT model;
    gpt_init(&model, mesh, c.L, c.H, c.C, c.T, mg_token_loader_vocab(train), c.seed, c.recompute);
    long nparams = 0;
    for (int i = 0; i < model.n; i++) {
        const int64_t *s = mg_dtensor_shape(model.p[i]);
        nparams += mg_dtensor_ndim(model.p[i]) == 2 ? s[0] * s[1] : s[0];
    }
    // AdamW as torch.optim.AdamW over every parameter; names for the checkpoint
    const char *names[4 + NBLOCK * c.L];
    for (int i = 0; i < model.n; i++) names[i] = model.name[i];
    mg_optim *opt = mg_optim_new_adamw(model.n, model.p, names, 0.9f, 0.95f, 1e-8f, 0.1f);
    mg_schedule *sched = mg_schedule_new_cosine(c.lr, c.lr_min, c.warmup, c.steps);
    if (!opt || !sched) die("optimizer");

    // the checkpoint: every parameter, the optimizer's state, the step, and the
    // model's attributes as `meshgrad train` writes them
    char arch[128];
    snprintf(arch, sizeof arch, "gpt L%d H%d C%d T%d V%d", c.L, c.H, c.C, c.T, model.V);
    const char *keys[5] = {"model.layers", "model.heads", "model.embd", "model.ctx", "model.vocab"};
    int sizes[5] = {c.L, c.H, c.C, c.T, model.V};
    mg_ckpt *ckpt = mg_ckpt_new();
    for (int i = 0; ckpt && i < model.n; i++) CHECK(mg_ckpt_add(ckpt, model.name[i], model.p[i]));
    CHECK(mg_ckpt_set_optim(ckpt, opt));
    long start = 0;
    if (c.resume) {
        CHECK(mg_ckpt_load(ckpt, c.resume));
        for (int k = 0; k < 5; k++) {
            const char *saved = mg_ckpt_get_attr(ckpt, keys[k]);
            if (!saved || atoi(saved) != sizes[k]) {
                if (rank == 0) fprintf(stderr, "train_gpt: %s holds %s = %s, not %d\n", c.resume,
                                       keys[k], saved ? saved : "(none)", sizes[k]);
                mg_finalize();
                return 1;
            }
        }
        start = (long)mg_ckpt_step(ckpt);
    }
    if (rank == 0) {
        printf("model: %s, %ld parameters; %d rank(s), batch %d x %d micro-batch(es) of %d tokens\n",
               arch, nparams, ranks, c.B, c.A, c.T);
        printf("data: %s, %lld train tokens, %lld val windows\n", c.data,
               (long long)mg_token_loader_count(train), (long long)windows);
        if (c.resume) printf("resumed from %s at step %ld\n", c.resume, start);
    }

    // the timeline of steps -S A:B (counted from 1), cut to the run
    long trace_last = c.trace_last < c.steps ? c.trace_last : c.steps;
    if (c.trace) CHECK(mg_trace_open(c.trace, c.trace_first, trace_last));
    mg_placement batch = MG_SHARD(0); // x, y: (B, T), rows split over the ranks
    for (long step = start; step < c.steps; step++) {
        double t0 = now(), loss = 0;
        CHECK(mg_trace_step_begin(step + 1)); // also tells the flight recorder the step
        for (int a = 0; a < c.A; a++) {
            // sum gradients across ranks once, in the last micro-batch's backward
            mg_set_grad_sync(a == c.A - 1);
            mg_dtensor *x, *y;
            CHECK(mg_token_loader_batch(train, (uint64_t)c.seed, step * c.A + a, c.B, c.T, &batch,
                                        1, &x, &y));
            mg_dtensor *l = gpt_loss(&model, x, y, c.B);
            loss += value(l) / c.A;
            CHECK(mg_backward(mg_scale(l, 1.0f / c.A)));
        }
        double norm, lr = mg_schedule_lr(sched, step);
        CHECK(mg_optim_clip_grads(opt, c.clip, &norm));
        CHECK(mg_optim_step(opt, (float)lr));
        CHECK(mg_optim_zero_grad(opt));
        mg_step_end();
        CHECK(mg_trace_step_end(step + 1));
        if (rank == 0)
            printf("step %ld/%ld | loss %.6f | lr %.4e | norm %.4f | %.1f ms\n", step + 1, c.steps,
                   loss, lr, norm, (now() - t0) * 1e3);
        if (c.eval_every > 0 && (step + 1) % c.eval_every == 0 && step + 1 < c.steps) {
            double v = eval_loss(&model, val, windows, c.B);
            if (rank == 0) printf("val loss %.6f at step %ld\n", v, step + 1);
        }
    }
    CHECK(mg_trace_close()); // writes what it holds if the run ended before its last step
    double v = eval_loss(&model, val, windows, c.B);
    if (rank == 0) printf("val loss %.6f at step %ld\n", v, c.steps);

    if (c.out) {
        CHECK(mg_ckpt_set_step(ckpt, c.steps));
        CHECK(mg_ckpt_set_attr(ckpt, "model", "gpt"));
        for (int k = 0; k < 5; k++) {
            char v[32];
            snprintf(v, sizeof v, "%d", sizes[k]);
            CHECK(mg_ckpt_set_attr(ckpt, keys[k], v));
        }
        CHECK(mg_ckpt_set_attr(ckpt, "model.qkv_rows",
                               "per head: (heads, 3, embd / heads), q k v of a head together"));
        CHECK(mg_ckpt_set_attr(ckpt, "data.file", c.data));
        CHECK(mg_ckpt_save(ckpt, c.out));
        if (rank == 0) printf("saved %s (step %ld)\n", c.out, c.steps);
    }
    fflush(stdout);
    mg_ckpt_free(ckpt);
    mg_optim_free(opt);
    mg_schedule_free(sched);
    for (int i = 0; i < model.n; i++) mg_dtensor_free(model.p[i]);
    free(model.p);
    free(model.name);
    mg_token_loader_close(train);
    mg_token_loader_close(val);
    mg_mesh_free(mesh);
    mg_finalize();
    return 0;
}
