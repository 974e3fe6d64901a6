/* env_detect.c - the job is read correctly from each launcher's environment, and a wrong
 * environment gives a clear error (the message a user sees is printed). */
#include "bootstrap/env.h"
#include "harness.h"

static const char *all_vars[] = {"CHORUS_RANK",
                                 "CHORUS_SIZE",
                                 "CHORUS_LOCAL_RANK",
                                 "CHORUS_LOCAL_SIZE",
                                 "CHORUS_STORE_ADDR",
                                 "CHORUS_JOB_ID",
                                 "RANK",
                                 "WORLD_SIZE",
                                 "LOCAL_RANK",
                                 "LOCAL_WORLD_SIZE",
                                 "MASTER_ADDR",
                                 "MASTER_PORT",
                                 "TORCHELASTIC_RUN_ID",
                                 "TORCHELASTIC_USE_AGENT_STORE",
                                 "OMPI_COMM_WORLD_RANK",
                                 "OMPI_COMM_WORLD_SIZE",
                                 "OMPI_COMM_WORLD_LOCAL_RANK",
                                 "OMPI_COMM_WORLD_LOCAL_SIZE",
                                 "OMPI_MCA_ess_base_jobid",
                                 "PMIX_NAMESPACE",
                                 "PMI_RANK",
                                 "PMI_SIZE",
                                 "SLURM_PROCID",
                                 "SLURM_NTASKS",
                                 "SLURM_STEP_NUM_TASKS",
                                 "SLURM_LOCALID",
                                 "SLURM_JOB_ID",
                                 "SLURM_STEP_ID",
                                 "SLURM_STEP_NUM_NODES",
                                 "SLURM_NNODES",
                                 "SLURM_STEP_NODELIST",
                                 "SLURM_JOB_NODELIST",
                                 "JOB_COMPLETION_INDEX"};

static void clear(void)
{
    for (size_t i = 0; i < sizeof(all_vars) / sizeof(all_vars[0]); i++) unsetenv(all_vars[i]);
}

static void expect_error(const char *what, const char *needle)
{
    chorus_job j;
    chorus_errbuf e = {{0}};
    chorus_result r = chorus__job_from_env(&j, &e);
    if (r != CHORUS_ERR_ENV)
        test_fail(__FILE__, __LINE__, "%s: expected CHORUS_ERR_ENV, got %s", what,
                  chorus_strerror(r));
    printf("%-34s -> %s\n", what, e.msg);
    ASSERT_STR_CONTAINS(e.msg, needle);
}

/* A pod of a Kubernetes Indexed Job: rank from JOB_COMPLETION_INDEX, world size from
 * WORLD_SIZE, rank 0's address from MASTER_ADDR and MASTER_PORT or its default port; the
 * launchers whose variables win over it; the mistakes. Deriving rank 0's name from the pod's
 * own needs the pod's hostname and /etc/hosts: tests/net/k8s_pods.sh. */
static void kubernetes_cases(void)
{
    chorus_job j;
    chorus_errbuf e = {{0}};
    clear();
    /* The manifest's variables, PyTorchJob style. */
    setenv("JOB_COMPLETION_INDEX", "3", 1);
    setenv("WORLD_SIZE", "4", 1);
    setenv("MASTER_ADDR", "chorus-0.chorus", 1);
    setenv("MASTER_PORT", "29511", 1);
    setenv("CHORUS_JOB_ID", "train", 1);
    ASSERT_OK(chorus__job_from_env(&j, &e));
    ASSERT(!strcmp(j.launcher, "kubernetes") && j.rank == 3 && j.size == 4);
    ASSERT(j.local_rank == -1 && j.local_size == -1); /* from host identities */
    ASSERT(!strcmp(j.store_addr, "chorus-0.chorus:29511") && j.serve_store);
    ASSERT(!strcmp(j.job, "k8s-train"));
    unsetenv("MASTER_PORT"); /* the default port */
    ASSERT_OK(chorus__job_from_env(&j, &e));
    ASSERT(!strcmp(j.store_addr, "chorus-0.chorus:29500"));
    setenv("CHORUS_STORE_ADDR", "10.0.0.9:7000", 1); /* named outright: wins */
    ASSERT_OK(chorus__job_from_env(&j, &e));
    ASSERT(!strcmp(j.launcher, "kubernetes") && !strcmp(j.store_addr, "10.0.0.9:7000"));
    unsetenv("CHORUS_STORE_ADDR");
    unsetenv("WORLD_SIZE");
    setenv("CHORUS_SIZE", "4", 1); /* CHORUS_SIZE instead of WORLD_SIZE */
    ASSERT_OK(chorus__job_from_env(&j, &e));
    ASSERT(!strcmp(j.launcher, "kubernetes") && j.size == 4);
    unsetenv("CHORUS_SIZE");

    /* A pod that runs its own launcher: RANK or CHORUS_RANK say who this process is. */
    setenv("WORLD_SIZE", "8", 1);
    setenv("RANK", "5", 1);
    setenv("MASTER_PORT", "29500", 1);
    ASSERT_OK(chorus__job_from_env(&j, &e));
    ASSERT(!strcmp(j.launcher, "torchrun") && j.rank == 5 && j.size == 8);
    unsetenv("RANK");
    setenv("CHORUS_RANK", "1", 1);
    setenv("CHORUS_SIZE", "2", 1);
    setenv("CHORUS_STORE_ADDR", "127.0.0.1:5000", 1);
    ASSERT_OK(chorus__job_from_env(&j, &e));
    ASSERT(!strcmp(j.launcher, "chorus-run") && j.rank == 1 && j.size == 2);
    clear();

    /* Mistakes. */
    setenv("JOB_COMPLETION_INDEX", "0", 1);
    expect_error("JOB_COMPLETION_INDEX without WORLD_SIZE",
                 "kubernetes: JOB_COMPLETION_INDEX=0 makes this a pod of an Indexed Job, but "
                 "WORLD_SIZE is not set: set it in the container's env to the Job's completions");
    setenv("JOB_COMPLETION_INDEX", "2", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("MASTER_ADDR", "chorus-0.chorus", 1);
    expect_error("JOB_COMPLETION_INDEX=2 WORLD_SIZE=2",
                 "kubernetes: JOB_COMPLETION_INDEX=2 is not below WORLD_SIZE=2: the Job's "
                 "completions and the world size must be equal");
    setenv("JOB_COMPLETION_INDEX", "x", 1);
    expect_error("JOB_COMPLETION_INDEX=x", "JOB_COMPLETION_INDEX=x is not a valid non-negative");
    setenv("JOB_COMPLETION_INDEX", "1", 1);
    setenv("MASTER_PORT", "0", 1);
    expect_error("MASTER_PORT=0", "MASTER_PORT=0 is not a valid port");
    clear();
}

int main(void)
{
    chorus_job j;
    chorus_errbuf e = {{0}};
    clear();
    ASSERT_OK(chorus__job_from_env(&j, &e));
    ASSERT(!strcmp(j.launcher, "none") && j.rank == 0 && j.size == 1);

    /* chorus-run */
    setenv("CHORUS_RANK", "2", 1);
    setenv("CHORUS_SIZE", "4", 1);
    setenv("CHORUS_STORE_ADDR", "127.0.0.1:5000", 1);
    setenv("CHORUS_JOB_ID", "abc", 1);
    ASSERT_OK(chorus__job_from_env(&j, &e));
    ASSERT(!strcmp(j.launcher, "chorus-run") && j.rank == 2 && j.size == 4 && !j.serve_store);
    ASSERT(!strcmp(j.store_addr, "127.0.0.1:5000") && !strcmp(j.job, "abc"));
    setenv("CHORUS_RANK", "4", 1);
    expect_error("CHORUS_RANK=4 CHORUS_SIZE=4", "rank 4 is out of range for a world of 4");
    setenv("CHORUS_RANK", "two", 1);
    expect_error("CHORUS_RANK=two", "CHORUS_RANK=two is not a valid non-negative integer");
    clear();

    /* torchrun style, by hand */
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "3", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "29500", 1);
    setenv("LOCAL_RANK", "1", 1);
    ASSERT_OK(chorus__job_from_env(&j, &e));
    ASSERT(!strcmp(j.launcher, "torchrun") && j.rank == 1 && j.size == 3 && j.local_rank == 1);
    ASSERT(!strcmp(j.store_addr, "127.0.0.1:29500") && j.serve_store);
    setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1); /* real torchrun: its store has the port */
    ASSERT_OK(chorus__job_from_env(&j, &e));
    ASSERT(!strcmp(j.store_addr, "127.0.0.1:29501"));
    unsetenv("MASTER_PORT");
    expect_error("RANK/WORLD_SIZE without MASTER_PORT",
                 "MASTER_ADDR and MASTER_PORT must both be set");
    setenv("MASTER_PORT", "99999", 1);
    expect_error("MASTER_PORT=99999", "MASTER_PORT=99999 is not a valid port");
    clear();

    /* mpirun on one host: meet through a file named after the job */
    setenv("OMPI_COMM_WORLD_RANK", "0", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
    setenv("OMPI_MCA_ess_base_jobid", "777", 1);
    ASSERT_OK(chorus__job_from_env(&j, &e));
    ASSERT(!strcmp(j.launcher, "mpirun") && j.size == 2 && j.local_size == 2);
    ASSERT_STR_CONTAINS(j.rdzv_file, "chorus-rdzv-ompi-777");
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "1", 1); /* several hosts, no meeting point */
    expect_error("mpirun on 2 hosts, no MASTER_ADDR", "-x MASTER_ADDR=");
    setenv("PMIX_NAMESPACE", "1234", 1); /* ... unless mpirun's PMIx server can carry one */
    ASSERT_OK(chorus__job_from_env(&j, &e));
    ASSERT(j.pmix && j.serve_store && !j.store_addr[0] && !j.rdzv_file[0]);
    unsetenv("PMIX_NAMESPACE");
    setenv("MASTER_ADDR", "node0", 1);
    setenv("MASTER_PORT", "29600", 1);
    ASSERT_OK(chorus__job_from_env(&j, &e));
    ASSERT(!strcmp(j.store_addr, "node0:29600") && !j.rdzv_file[0] && !j.pmix);
    clear();

    /* srun across nodes: the first node of the step serves the store */
    setenv("SLURM_PROCID", "5", 1);
    setenv("SLURM_NTASKS", "8", 1);
    setenv("SLURM_LOCALID", "1", 1);
    setenv("SLURM_JOB_ID", "4242", 1);
    setenv("SLURM_STEP_ID", "0", 1);
    setenv("SLURM_STEP_NUM_NODES", "4", 1);
    setenv("SLURM_STEP_NODELIST", "gpu[07-10],cpu1", 1);
    ASSERT_OK(chorus__job_from_env(&j, &e));
    ASSERT(!strcmp(j.launcher, "srun") && j.rank == 5 && j.size == 8 && j.local_rank == 1);
    ASSERT(!strncmp(j.store_addr, "gpu07:", 6));
    setenv("SLURM_STEP_NODELIST", "rack[2-3]-n[01-02]", 1);
    ASSERT_OK(chorus__job_from_env(&j, &e));
    ASSERT(!strncmp(j.store_addr, "rack2-n01:", 10));
    setenv("SLURM_STEP_NODELIST", "gpu[07-", 1);
    expect_error("SLURM_STEP_NODELIST=gpu[07-", "cannot read the node list 'gpu[07-'");
    setenv("SLURM_STEP_NODELIST", "gpu[07-10],cpu1", 1);
    setenv("SLURM_NTASKS", "0", 1);
    expect_error("SLURM_NTASKS=0", "world size must be at least 1");
    clear();
    kubernetes_cases();
    printf("environment detection ok\n");
    return 0;
}
