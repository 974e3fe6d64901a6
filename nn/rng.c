/*
 * rng.c - splitmix64 random numbers and seed mixing for initialisation, shuffling and
 * dropout. The state is one integer, so checkpoints carry it exactly.
 */
#include "chorus/nn.h"

void nn_rng_seed(nn_rng *r, uint64_t seed)
{
    r->s = seed;
}

uint64_t nn_rng_next(nn_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

float nn_rng_uniform(nn_rng *r)
{
    /* 24 random bits: every value is exactly representable and < 1. */
    return (float)(nn_rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

uint64_t nn_rng_below(nn_rng *r, uint64_t n)
{
    /* Rejects the top partial block so every residue is equally likely. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = nn_rng_next(r);
    while (x >= limit);
    return x % n;
}

uint64_t nn_seed_mix(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    nn_rng r = {a};
    uint64_t h = nn_rng_next(&r);
    r.s = h ^ b;
    h = nn_rng_next(&r);
    r.s = h ^ c;
    h = nn_rng_next(&r);
    r.s = h ^ d;
    return nn_rng_next(&r);
}
