/* llama2c_harness.c: llama2.c's own run.c, driven by tests/test_convert_torch.sh
 * (a helper, built there against the run.c of llama2.c's folder, never copied
 * here): loads a version-0 model file with run.c's build_transformer and runs
 * run.c's forward on each byte of a text (its first seq_len), writing every
 * position's logits as raw float32 (T, vocab).
 *   llama2c_harness MODEL.bin TEXT OUT.raw
 * Prints "T V" on success. */
#define TESTING /* run.c without its main */
#include "run.c"

int main(int argc, char *argv[]) {
    if (argc != 4) {
        fprintf(stderr, "usage: llama2c_harness MODEL.bin TEXT OUT.raw\n");
        return 2;
    }
    Transformer t;
    build_transformer(&t, argv[1]);
    FILE *in = fopen(argv[2], "rb"), *out = fopen(argv[3], "wb");
    if (!in || !out) {
        fprintf(stderr, "llama2c_harness: cannot open %s or %s\n", argv[2], argv[3]);
        return 1;
    }
    int V = t.config.vocab_size, T = 0, ch;
    while (T < t.config.seq_len && (ch = fgetc(in)) != EOF) {
        float *logits = forward(&t, ch, T++);
        if (fwrite(logits, sizeof(float), (size_t)V, out) != (size_t)V) return 1;
    }
    fclose(in);
    if (fclose(out) != 0) return 1;
    free_transformer(&t);
    printf("%d %d\n", T, V);
    return 0;
}
