/*
 * elastic_errors.c - the error paths of chorus/elastic.h, each with its message:
 *   chorus-run -np 2 elastic_errors
 * bad arguments, a duplicate name, commit outside the train function, CHORUS_ELASTIC=1
 * without the launcher's variables, ranks that registered different state (a mismatch that
 * chorus_elastic_run returns instead of re-forming), and an error of the train function
 * itself, returned as it is.
 */
#include <stdlib.h>
#include <string.h>

#include "chorus/elastic.h"
#include "harness.h"

static chorus_result train_never(chorus_elastic *el, chorus_comm *c, void *arg)
{
    (void)el, (void)c, (void)arg;
    test_fail(__FILE__, __LINE__, "train ran although the state did not match");
}

static chorus_result train_fails(chorus_elastic *el, chorus_comm *c, void *arg)
{
    (void)el, (void)c, (void)arg;
    return CHORUS_ERR_INVALID_ARG; /* the program's own error */
}

int main(void)
{
    chorus_elastic *el;
    ASSERT_EQ(chorus_elastic_create(NULL), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), "out is NULL");

    /* CHORUS_ELASTIC=1 but not launched by chorus-run --elastic */
    setenv("CHORUS_ELASTIC", "1", 1);
    char *wid = getenv("CHORUS_WORKER_ID") ? strdup(getenv("CHORUS_WORKER_ID")) : NULL;
    unsetenv("CHORUS_WORKER_ID");
    ASSERT_EQ(chorus_elastic_create(&el), CHORUS_ERR_ENV);
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), "launch with chorus-run --elastic");
    unsetenv("CHORUS_ELASTIC");
    free(wid);

    ASSERT_OK(chorus_elastic_create(&el));
    double w[4] = {1, 2, 3, 4}, extra = 0;
    ASSERT_EQ(chorus_elastic_register(el, NULL, w, sizeof(w)), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_elastic_last_error(el), "need a name of 1 to 63 bytes");
    ASSERT_EQ(chorus_elastic_register(el, "w", NULL, 8), CHORUS_ERR_INVALID_ARG);
    ASSERT_OK(chorus_elastic_register(el, "w", w, sizeof(w)));
    ASSERT_EQ(chorus_elastic_register(el, "w", w, sizeof(w)), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_elastic_last_error(el), "'w' is already registered");
    ASSERT_EQ(chorus_elastic_commit(el), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_elastic_last_error(el), "call it from the train function");
    ASSERT_EQ(chorus_elastic_run(el, NULL, NULL, NULL), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_elastic_last_error(el), "train is NULL");

    /* rank 1 registers one buffer more: the sync refuses, on every rank */
    const char *r = getenv("CHORUS_RANK");
    if (r && atoi(r) == 1) ASSERT_OK(chorus_elastic_register(el, "extra", &extra, sizeof(extra)));
    chorus_result res = chorus_elastic_run(el, train_never, NULL, NULL);
    ASSERT_EQ(res, CHORUS_ERR_MISMATCH);
    ASSERT_STR_CONTAINS(chorus_elastic_last_error(el), "registered different state buffers");
    printf("mismatch: %s\n", chorus_elastic_last_error(el));
    chorus_elastic_destroy(el);

    /* the train function's own error comes back unchanged */
    ASSERT_OK(chorus_elastic_create(&el));
    ASSERT_OK(chorus_elastic_register(el, "w", w, sizeof(w)));
    ASSERT_EQ(chorus_elastic_run(el, train_fails, NULL, NULL), CHORUS_ERR_INVALID_ARG);
    chorus_elastic_destroy(el);
    chorus_elastic_destroy(NULL);
    printf("ok\n");
    return 0;
}
