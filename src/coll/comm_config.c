/*
 * comm_config.c - chorus_comm_config_set: a communicator's own settings of the variables its
 * collectives read at every call (the forced algorithms, the size crossovers of the rules),
 * changed between calls through the config table's parser and the selection table's check,
 * never by writing the fields from outside.
 */
#include <string.h>

#include "coll/comm.h"

/* The rows a communicator reads at every call; the others are read when it is created. */
static int per_call(const char *name)
{
    return !strncmp(name, "CHORUS_ALGO_", 12) || !strcmp(name, "CHORUS_TCP_ONESHOT_MAX") ||
           !strcmp(name, "CHORUS_BCAST_TREE_MAX");
}

chorus_result chorus_comm_config_set(chorus_comm *c, const char *name, const char *value)
{
    if (!c)
        return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                            "chorus_comm_config_set: communicator is NULL");
    if (!name || !per_call(name))
        return chorus__fail(&c->err, CHORUS_ERR_INVALID_ARG,
                            "chorus_comm_config_set: %s is not read per call (a communicator's "
                            "own settings are CHORUS_ALGO_*, CHORUS_TCP_ONESHOT_MAX and "
                            "CHORUS_BCAST_TREE_MAX; set the others with chorus_config_set before "
                            "the communicator is made)",
                            name ? name : "(null)");
    chorus_config cfg =
        c->cfg; /* the new setting is checked on a copy: a bad one changes nothing */
    chorus_errbuf e = {{0}};
    chorus_result r = chorus__config_set(&cfg, name, value && *value ? value : NULL, &e);
    if (r == CHORUS_OK) r = chorus__select_check_config(&cfg, &e);
    if (r != CHORUS_OK) return chorus__fail(&c->err, r, "%s", e.msg); /* names the variable */
    c->cfg = cfg;
    return CHORUS_OK;
}
