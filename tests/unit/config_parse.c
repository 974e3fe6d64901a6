/* config_parse - the typed config: every default parses, values of each type are read
 * strictly, a malformed one is an error naming the variable and its value (from chorus_init
 * too), a communicator keeps the values it was created with and its splits inherit them, and
 * chorus_config_set's settings of the process win over the environment; chorus_comm_config_set
 * changes one communicator's per-call settings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/comm.h"
#include "harness.h"

static void clear_env(void)
{
    for (const chorus_cfg_entry *t = chorus__cfg_table(); t->name; t++) unsetenv(t->name);
}

/* Parses with name=value set; returns the result, leaves the message in e. */
static chorus_result parse_with(const char *name, const char *value, chorus_config *cfg,
                                chorus_errbuf *e)
{
    setenv(name, value, 1);
    e->msg[0] = 0;
    chorus_result r = chorus__config_parse(cfg, e);
    unsetenv(name);
    if (r != CHORUS_OK) printf("%s=%s -> %s\n", name, value, e->msg);
    return r;
}

static size_t field_size(const chorus_cfg_entry *t)
{
    switch (t->kind) {
    case CHORUS_CFG_INT: return sizeof(long);
    case CHORUS_CFG_DOUBLE:
    case CHORUS_CFG_POSNUM: return sizeof(double);
    case CHORUS_CFG_BOOL: return sizeof(int);
    case CHORUS_CFG_BYTES: return sizeof(size_t);
    default: return sizeof(const char *); /* equal text is stored once: equal pointers */
    }
}

static void defaults(void)
{
    chorus_config cfg;
    chorus_errbuf e;
    clear_env();
    ASSERT_OK(chorus__config_parse(&cfg, &e));
    ASSERT(cfg.timeout_s == 300.0);
    ASSERT_EQ(cfg.socket_buf, 4194304);
    ASSERT_EQ(cfg.max_message, 17179869184ull);
    ASSERT_EQ(cfg.shm, 1);
    ASSERT_EQ(cfg.bind_any, 0);
    ASSERT_EQ(cfg.rank, -1); /* integer without a default, unset */
    ASSERT(cfg.iface == NULL && cfg.secret == NULL && cfg.algo_allreduce == NULL);
    ASSERT_STR_CONTAINS(cfg.debug_subsys, "ALL");
    ASSERT_STR_CONTAINS(cfg.bind, "core");
    /* each default, given explicitly, parses to the same value */
    for (const chorus_cfg_entry *t = chorus__cfg_table(); t->name; t++) {
        chorus_config set;
        if (!t->def) continue;
        ASSERT_OK(parse_with(t->name, t->def, &set, &e));
        ASSERT(!memcmp((char *)&set + t->offset, (char *)&cfg + t->offset, field_size(t)));
    }
}

static void typed_values(void)
{
    chorus_config cfg;
    chorus_errbuf e;
    ASSERT_OK(parse_with("CHORUS_TIMEOUT_S", "2.5", &cfg, &e));
    ASSERT(cfg.timeout_s == 2.5);
    ASSERT_OK(parse_with("CHORUS_SHM_CHUNK", "64K", &cfg, &e));
    ASSERT_EQ(cfg.shm_chunk, 65536);
    ASSERT_OK(parse_with("CHORUS_MAX_MESSAGE", "2G", &cfg, &e));
    ASSERT_EQ(cfg.max_message, 2ull << 30);
    ASSERT_OK(parse_with("CHORUS_SHM", "off", &cfg, &e));
    ASSERT_EQ(cfg.shm, 0);
    ASSERT_OK(parse_with("CHORUS_BIND_ANY", "TRUE", &cfg, &e));
    ASSERT_EQ(cfg.bind_any, 1);
    ASSERT_OK(parse_with("CHORUS_ALGO_BROADCAST", "chain", &cfg, &e));
    ASSERT_STR_CONTAINS(cfg.algo_broadcast, "chain");
    ASSERT_EQ(strlen(cfg.algo_broadcast), 5);
    ASSERT_OK(parse_with("CHORUS_DEBUG", "debug", &cfg, &e)); /* any case, listed spelling */
    ASSERT_EQ(strcmp(cfg.debug, "DEBUG"), 0);
    ASSERT_OK(parse_with("CHORUS_DEBUG_SUBSYS", "coll,Shm", &cfg, &e));
    ASSERT_EQ(strcmp(cfg.debug_subsys, "COLL,SHM"), 0);
    ASSERT_OK(parse_with("CHORUS_BIND", "NONE", &cfg, &e));
    ASSERT_EQ(strcmp(cfg.bind, "none"), 0);
    ASSERT_OK(parse_with("CHORUS_IFACE", "lo", &cfg, &e));
    ASSERT_STR_CONTAINS(cfg.iface, "lo");
    ASSERT_OK(parse_with("CHORUS_IFACE", "", &cfg, &e)); /* empty: unset */
    ASSERT(cfg.iface == NULL);
}

static void malformed(void)
{
    chorus_config cfg;
    chorus_errbuf e;
    ASSERT_EQ(parse_with("CHORUS_TIMEOUT_S", "abc", &cfg, &e), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(e.msg,
                        "CHORUS_TIMEOUT_S=abc is not a positive number (above 0, e.g. 30 or 2.5)");
    ASSERT(cfg.timeout_s == 300.0); /* the bad row holds its default */
    /* a timeout of 0 or below is no timeout: refused, not read as the default */
    ASSERT_EQ(parse_with("CHORUS_TIMEOUT_S", "0", &cfg, &e), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(e.msg, "CHORUS_TIMEOUT_S=0 is not a positive number (above 0");
    ASSERT_EQ(parse_with("CHORUS_TIMEOUT_S", "-5", &cfg, &e), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(e.msg, "CHORUS_TIMEOUT_S=-5 is not a positive number");
    ASSERT_EQ(parse_with("CHORUS_TIMEOUT_S", "inf", &cfg, &e), CHORUS_ERR_INVALID_ARG);
    ASSERT_EQ(parse_with("CHORUS_HEARTBEAT_TIMEOUT_S", "0", &cfg, &e), CHORUS_ERR_INVALID_ARG);
    ASSERT_EQ(parse_with("CHORUS_ENGINE_IDLE_MS", "0", &cfg, &e), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(e.msg, "CHORUS_ENGINE_IDLE_MS=0 is not a positive number (above 0");
    /* log level and subsystems: the names users type, any case; anything else is refused */
    ASSERT_EQ(parse_with("CHORUS_DEBUG", "verbose", &cfg, &e), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(e.msg, "CHORUS_DEBUG=verbose is not one of NONE,OFF,VERSION,ERROR,WARN,"
                               "INFO,DEBUG,TRACE");
    ASSERT_EQ(parse_with("CHORUS_DEBUG_SUBSYS", "INIT,NETWORK", &cfg, &e), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(e.msg, "CHORUS_DEBUG_SUBSYS=INIT,NETWORK is not a comma-separated list of "
                               "INIT,BOOT,COLL");
    ASSERT_EQ(parse_with("CHORUS_DEBUG_SUBSYS", "INIT,", &cfg, &e), CHORUS_ERR_INVALID_ARG);
    ASSERT_EQ(parse_with("CHORUS_COMPRESSION", "fp8", &cfg, &e), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(e.msg, "CHORUS_COMPRESSION=fp8 is not one of none,fp16,bf16");
    ASSERT_EQ(parse_with("CHORUS_HEARTBEAT_S", "-1", &cfg, &e), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(e.msg, "CHORUS_HEARTBEAT_S=-1 is not a non-negative number");
    ASSERT_EQ(parse_with("CHORUS_SOCKET_BUF", "-5", &cfg, &e), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(e.msg, "CHORUS_SOCKET_BUF=-5 is not a size in bytes");
    ASSERT_EQ(parse_with("CHORUS_SHM_CHUNK", "64X", &cfg, &e), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(e.msg, "CHORUS_SHM_CHUNK=64X is not a size in bytes");
    ASSERT_EQ(parse_with("CHORUS_MAX_MESSAGE", "99999999999G", &cfg, &e), CHORUS_ERR_INVALID_ARG);
    ASSERT_EQ(parse_with("CHORUS_SPIN_US", "5.5", &cfg, &e), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(e.msg, "CHORUS_SPIN_US=5.5 is not a non-negative integer");
    ASSERT_EQ(parse_with("CHORUS_SHM", "maybe", &cfg, &e), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(e.msg, "CHORUS_SHM=maybe is not a boolean");
    ASSERT_EQ(parse_with("CHORUS_BIND", "socket", &cfg, &e), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(e.msg, "CHORUS_BIND=socket is not one of core,none");
    ASSERT_EQ(parse_with("CHORUS_BIND", "cor", &cfg, &e), CHORUS_ERR_INVALID_ARG);
    /* algorithm names are the selection table's: checked against it, not by the parser */
    ASSERT_OK(parse_with("CHORUS_ALGO_BROADCAST", "fast", &cfg, &e));
    ASSERT_EQ(chorus__select_check_config(&cfg, &e), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(e.msg,
                        "CHORUS_ALGO_BROADCAST=fast is not an algorithm of broadcast; valid:");
    ASSERT_STR_CONTAINS(e.msg, "tree, chain");
    ASSERT_OK(parse_with("CHORUS_ALGO_BROADCAST", "chain", &cfg, &e));
    ASSERT_OK(chorus__select_check_config(&cfg, &e));
    /* set one row on a parsed config, as tests do on a communicator */
    ASSERT_OK(chorus__config_parse(&cfg, &e));
    ASSERT_OK(chorus__config_set(&cfg, "CHORUS_ALGO_ALLREDUCE", "ring", &e));
    ASSERT_STR_CONTAINS(cfg.algo_allreduce, "ring");
    ASSERT_OK(chorus__config_set(&cfg, "CHORUS_ALGO_ALLREDUCE", NULL, &e));
    ASSERT(cfg.algo_allreduce == NULL);
    ASSERT_EQ(chorus__config_set(&cfg, "CHORUS_NO_SUCH", "1", &e), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(e.msg, "CHORUS_NO_SUCH is not a Chorus variable");
}

/* chorus_init (a world of one: no launcher variables) refuses a malformed value. */
static void init_refuses(void)
{
    chorus_comm *c = NULL;
    setenv("CHORUS_TIMEOUT_S", "abc", 1);
    ASSERT_EQ(chorus_init(&c), CHORUS_ERR_INVALID_ARG);
    ASSERT(c == NULL);
    printf("chorus_init: %s\n", chorus_last_error(NULL));
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), "invalid environment: CHORUS_TIMEOUT_S=abc is not "
                                                 "a positive number (above 0, e.g. 30 or 2.5)");
    unsetenv("CHORUS_TIMEOUT_S");
}

/* A communicator keeps what it was created with; a split inherits it. */
static void snapshot(void)
{
    chorus_comm *c = NULL, *s = NULL;
    setenv("CHORUS_TCP_ONESHOT_MAX", "1K", 1);
    ASSERT_OK(chorus_init(&c));
    setenv("CHORUS_TCP_ONESHOT_MAX", "2K", 1);
    ASSERT_EQ(c->cfg.tcp_oneshot_max, 1024);
    ASSERT_OK(chorus_comm_split(c, 0, 0, &s));
    ASSERT_EQ(s->cfg.tcp_oneshot_max, 1024);
    unsetenv("CHORUS_TCP_ONESHOT_MAX");
    chorus_finalize(s);
    chorus_finalize(c);
}

/* chorus_config_set: a setting of the process, checked as the environment's value, wins
 * over the environment without changing it, reaches chorus_init and the job variables, and is
 * removed again by NULL. */
static void process_settings(void)
{
    setenv("CHORUS_TCP_ONESHOT_MAX", "2K", 1);
    ASSERT_OK(chorus_config_set("CHORUS_TCP_ONESHOT_MAX", "4K"));
    ASSERT_EQ(strcmp(getenv("CHORUS_TCP_ONESHOT_MAX"), "2K"), 0);
    ASSERT_EQ(strcmp(chorus_config_get("CHORUS_TCP_ONESHOT_MAX"), "4K"), 0);
    chorus_comm *c = NULL;
    ASSERT_OK(chorus_init(&c));
    ASSERT_EQ(c->cfg.tcp_oneshot_max, 4096);
    chorus_finalize(c);
    ASSERT_OK(chorus_config_set("CHORUS_TCP_ONESHOT_MAX", NULL));
    ASSERT_EQ(strcmp(chorus_config_get("CHORUS_TCP_ONESHOT_MAX"), "2K"), 0);
    unsetenv("CHORUS_TCP_ONESHOT_MAX");
    ASSERT(!chorus_config_is_set("CHORUS_TCP_ONESHOT_MAX"));
    ASSERT(chorus_config_get("CHORUS_TCP_ONESHOT_MAX") == NULL);

    /* A job variable: chorus_init reads the rank from it (rank 5 of a world of 2: refused,
     * naming the setting's values). */
    ASSERT_OK(chorus_config_set("CHORUS_RANK", "5"));
    ASSERT_OK(chorus_config_set("CHORUS_SIZE", "2"));
    ASSERT_OK(chorus_config_set("CHORUS_STORE_ADDR", "127.0.0.1:1"));
    ASSERT_EQ(chorus_init(&c), CHORUS_ERR_ENV);
    printf("chorus_init: %s\n", chorus_last_error(NULL));
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), "rank 5 is out of range for a world of 2");
    ASSERT_OK(chorus_config_set("CHORUS_RANK", NULL));
    ASSERT_OK(chorus_config_set("CHORUS_SIZE", ""));
    ASSERT_OK(chorus_config_set("CHORUS_STORE_ADDR", NULL));
    ASSERT(!chorus_config_is_set("CHORUS_RANK") && !chorus_config_is_set("CHORUS_SIZE"));

    /* Bad values and names are refused, naming them, and nothing is set. */
    ASSERT_EQ(chorus_config_set("CHORUS_TIMEOUT_S", "abc"), CHORUS_ERR_INVALID_ARG);
    printf("chorus_config_set: %s\n", chorus_last_error(NULL));
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), "chorus_config_set: CHORUS_TIMEOUT_S=abc is not a "
                                                 "positive number");
    ASSERT(!chorus_config_is_set("CHORUS_TIMEOUT_S"));
    ASSERT_EQ(chorus_config_set("CHORUS_TIMOUT_S", "5"), CHORUS_ERR_INVALID_ARG);
    printf("chorus_config_set: %s\n", chorus_last_error(NULL));
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), "CHORUS_TIMOUT_S is not a Chorus variable");
    ASSERT_EQ(chorus_config_set(NULL, "5"), CHORUS_ERR_INVALID_ARG);
}

/* chorus_comm_config_set: a communicator's own setting of a variable read per call, checked
 * like the environment's (an algorithm against its collective's), inherited by later splits;
 * a refused one names why and changes nothing. */
static void comm_settings(void)
{
    chorus_comm *c = NULL, *s = NULL;
    ASSERT_OK(chorus_init(&c));
    ASSERT_OK(chorus_comm_config_set(c, "CHORUS_ALGO_ALLREDUCE", "ring"));
    ASSERT_OK(chorus_comm_config_set(c, "CHORUS_TCP_ONESHOT_MAX", "8K"));
    ASSERT_EQ(strcmp(c->cfg.algo_allreduce, "ring"), 0);
    ASSERT_EQ(c->cfg.tcp_oneshot_max, 8192);
    ASSERT(!chorus_config_is_set("CHORUS_ALGO_ALLREDUCE")); /* the process's setting is untouched */
    ASSERT_OK(chorus_comm_split(c, 0, 0, &s));
    ASSERT_EQ(strcmp(s->cfg.algo_allreduce, "ring"), 0);
    float x = 2, y = 0;
    ASSERT_OK(chorus_allreduce(c, &x, &y, 1, CHORUS_FLOAT32, CHORUS_SUM));
    ASSERT_EQ(y, 2);

    ASSERT_EQ(chorus_comm_config_set(c, "CHORUS_ALGO_ALLREDUCE", "warp"), CHORUS_ERR_INVALID_ARG);
    printf("chorus_comm_config_set: %s\n", chorus_last_error(c));
    ASSERT_STR_CONTAINS(chorus_last_error(c),
                        "CHORUS_ALGO_ALLREDUCE=warp is not an algorithm of allreduce; valid:");
    ASSERT_EQ(strcmp(c->cfg.algo_allreduce, "ring"), 0);
    ASSERT_EQ(chorus_comm_config_set(c, "CHORUS_TCP_ONESHOT_MAX", "-1"), CHORUS_ERR_INVALID_ARG);
    printf("chorus_comm_config_set: %s\n", chorus_last_error(c));
    ASSERT_STR_CONTAINS(chorus_last_error(c), "CHORUS_TCP_ONESHOT_MAX=-1");
    ASSERT_EQ(c->cfg.tcp_oneshot_max, 8192);
    ASSERT_EQ(chorus_comm_config_set(c, "CHORUS_SHM", "0"), CHORUS_ERR_INVALID_ARG);
    printf("chorus_comm_config_set: %s\n", chorus_last_error(c));
    ASSERT_STR_CONTAINS(chorus_last_error(c),
                        "chorus_comm_config_set: CHORUS_SHM is not read per call");
    ASSERT_EQ(chorus_comm_config_set(NULL, "CHORUS_ALGO_ALLREDUCE", "ring"),
              CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), "communicator is NULL");

    ASSERT_OK(chorus_comm_config_set(c, "CHORUS_ALGO_ALLREDUCE", NULL)); /* the rules again */
    ASSERT(c->cfg.algo_allreduce == NULL);
    chorus_finalize(s);
    chorus_finalize(c);
}

static void hashing(void)
{
    const char a[] = "generation-1", b[] = "generation-2";
    ASSERT(chorus__hash64(a, sizeof(a)) != chorus__hash64(b, sizeof(b)));
    ASSERT(chorus__hash64(a, sizeof(a)) == chorus__hash64_seed(0, a, sizeof(a)));
    ASSERT(chorus__hash64_seed(1, a, sizeof(a)) != chorus__hash64_seed(2, a, sizeof(a)));
    ASSERT(chorus__hash64(a, 0) != chorus__hash64(a, 1));
}

int main(void)
{
    clear_env();
    defaults();
    typed_values();
    malformed();
    init_refuses();
    snapshot();
    process_settings();
    comm_settings();
    hashing();
    printf("config_parse: ok\n");
    return 0;
}
