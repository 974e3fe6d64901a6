/*
 * llmc_gpt.c - trains a GPT with llm.c's CPU trainer (train_gpt2.c of a checkout of
 * karpathy/llm.c, which bench/gpt.sh builds this file against; neither is part of Chorus) for
 * a fixed number of steps, and times them. llm.c's own main trains 4 x 64 tokens per step
 * for 40 steps on fixed files; this main is the same loop (its data loader, forward, zero_grad,
 * backward and AdamW update, in that order, timed around each step as its main does) with the
 * batch, the sequence length, the steps and the files given:
 *
 *   llmc_gpt CHECKPOINT TOKENS B T STEPS WARMUP LR WEIGHT_DECAY
 *
 * CHECKPOINT is a train_gpt2.c checkpoint (bench/gpt_prep.c writes one from Chorus's initial
 * parameters), TOKENS a token file of its data loader (shuffled batches of B x T + 1 tokens).
 * The first WARMUP steps are not timed. Output: one line "llmc_gpt: ... tokens_per_s X".
 * Compiled as llm.c's Makefile compiles train_gpt2.c (-Ofast -march=native -fopenmp -DOMP);
 * OMP_NUM_THREADS sets its threads.
 */
#define TESTING /* train_gpt2.c without its main (as llm.c's test_gpt2.c includes it) */
#include "train_gpt2.c"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc != 9) {
        fprintf(stderr, "usage: llmc_gpt CHECKPOINT TOKENS B T STEPS WARMUP LR WEIGHT_DECAY\n");
        return 2;
    }
    int B = atoi(argv[3]), T = atoi(argv[4]), steps = atoi(argv[5]), warmup = atoi(argv[6]);
    float lr = strtof(argv[7], NULL), wd = strtof(argv[8], NULL);
    if (B <= 0 || T <= 0 || warmup < 0 || steps <= warmup) {
        fprintf(stderr, "llmc_gpt: need B, T > 0 and STEPS > WARMUP >= 0\n");
        return 2;
    }
    GPT2 model;
    gpt2_build_from_checkpoint(&model, argv[1]);
    if (T > model.config.max_seq_len) {
        fprintf(stderr, "llmc_gpt: T %d exceeds the checkpoint's %d\n", T,
                model.config.max_seq_len);
        return 2;
    }
    DataLoader loader;
    dataloader_init(&loader, argv[2], B, T, 0, 1, 1);
    double timed = 0;
    for (int step = 0; step < steps; step++) {
        double t0 = now_s();
        dataloader_next_batch(&loader);
        gpt2_forward(&model, loader.inputs, loader.targets, B, T);
        gpt2_zero_grad(&model);
        gpt2_backward(&model);
        gpt2_update(&model, lr, 0.9f, 0.999f, 1e-8f, wd, step + 1);
        if (step >= warmup) timed += now_s() - t0;
    }
    int threads = 1;
#ifdef OMP
    threads = omp_get_max_threads();
#endif
    printf("llmc_gpt: B %d T %d steps %d (%d timed) threads %d loss %.4f step_s %.6f "
           "tokens_per_s %.1f\n",
           B, T, steps, steps - warmup, threads, model.mean_loss, timed / (steps - warmup),
           (double)B * T * (steps - warmup) / timed);
    dataloader_free(&loader);
    gpt2_free(&model);
    return 0;
}
