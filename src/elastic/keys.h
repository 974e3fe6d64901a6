/*
 * keys.h - the keys of the elastic membership protocol in the launcher's store, shared by
 * src/elastic/elastic.c (the workers) and src/launch/elastic.c (the launcher). Every key and
 * value format is defined here and nowhere else.
 *
 *   el/next            newest generation the launcher is forming (or formed), in decimal
 *   el/in/<g>/<w>      worker w checks in for generation g; value: the worker id it lost, or -1
 *   el/round/<g>       "<g> <n> <w0> ... <wn-1>": the members of generation g in rank order;
 *                      "done" when the job finished without forming it
 *   el/out/<w>         worker w is retired (scale-down); value: why
 *
 * Generation g's communicator is an ordinary one whose job id (store namespace) is
 * "<job>.g<g>", so its keys and connections never mix with another generation's; in it,
 * rank/<r> is rank r's rendezvous record (written by chorus_init's address exchange), which
 * the launcher sets to "lost" for a member that died before writing it.
 */
#ifndef CHORUS_ELASTIC_KEYS_H
#define CHORUS_ELASTIC_KEYS_H

#include <stdio.h>

#define CHORUS_EL_NEXT       "el/next"
#define CHORUS_EL_ROUND_DONE "done"
#define CHORUS_EL_RANK_LOST  "lost"

/* Writes a key or a generation's job id into out (len bytes); returns what snprintf returns. */
static inline int chorus_el_key_in(char *out, size_t len, long gen, int wid)
{
    return snprintf(out, len, "el/in/%ld/%d", gen, wid);
}
static inline int chorus_el_key_round(char *out, size_t len, long gen)
{
    return snprintf(out, len, "el/round/%ld", gen);
}
static inline int chorus_el_key_out(char *out, size_t len, int wid)
{
    return snprintf(out, len, "el/out/%d", wid);
}
/* "<job>.g<g>": the job id of generation g (at most 40 bytes of the job's own id). */
static inline int chorus_el_gen_job(char *out, size_t len, const char *job, long gen)
{
    return snprintf(out, len, "%.40s.g%d", job, (int)(gen & 0x7fffffff));
}
/* rank/<r>: rank r's rendezvous record in a communicator's namespace. */
static inline int chorus_el_key_rank(char *out, size_t len, int rank)
{
    return snprintf(out, len, "rank/%d", rank);
}

#endif
