#!/bin/sh
# Writes docs/ENVIRONMENT.md from the config table (the same one `chorus-run --help-env`
# prints), so the two never disagree. Usage: tools/gen-env-doc.sh [build-dir] > docs/ENVIRONMENT.md
BUILD=${1:-${BUILD:-build}}
cat <<'HEAD'
# Environment variables

Every `CHORUS_*` variable Chorus reads, with its default. This file is generated from the
library's config table by `tools/gen-env-doc.sh`; `chorus-run --help-env` prints the same table.
A test fails if the two disagree.

Each value is read once, when a communicator is created (chorus-run checks them before it
starts any rank), and must have the form of its type: `integer` (non-negative), `number`
(non-negative, e.g. `2.5`), `0/1` (also `true/false`, `yes/no`, `on/off`), `bytes` (a
non-negative integer, optionally with `K`, `M` or `G`: `64K`), `name` (one of the names the
meaning lists, in any case), `names` (a comma-separated list of them), `positive` (a number
above 0), `text` or `secret` (text that is never logged). Anything else is an error, never a
silent default: chorus-run refuses to start and `chorus_init` returns `CHORUS_ERR_INVALID_ARG`,
with one line that names the variable, the value and what is accepted, for example
`invalid environment: CHORUS_TIMEOUT_S=0 is not a positive number (above 0, e.g. 30 or 2.5)`.
A `CHORUS_*` name that is none of these (a misspelling) is not an error but is warned about on
stderr, whatever `CHORUS_DEBUG` says, once per process (by chorus-run for the ranks it starts),
with the closest known name: `CHORUS_TIMOUT_S is not a Chorus variable and is ignored; did you
mean CHORUS_TIMEOUT_S?`. With `CHORUS_DEBUG=INFO` the library version and every variable that
is set are logged once (`CHORUS_TIMEOUT_S=20 (set)`); `CHORUS_DEBUG=TRACE` adds a line per
collective with the algorithm and why it was chosen.

A program can also give the library a variable without the environment:
`chorus_config_set(name, value)` (`include/chorus.h`) sets it for this process only, checked as
the environment's value would be (a bad one is refused, naming it), and wins over the
environment wherever the library reads the variable next; child processes do not see it, and
`chorus_config_set(name, NULL)` gives the environment back its say. `chorus_config_get` and
`chorus_config_is_set` read what the library sees. `chorus.torch.distributed` passes the
meeting point and the deadline to `chorus_init` this way. The variables a communicator reads at every call
(`CHORUS_ALGO_*`, `CHORUS_TCP_ONESHOT_MAX`, `CHORUS_BCAST_TREE_MAX`) can also be set for one
communicator between calls, on every rank alike: `chorus_comm_config_set(comm, name, value)`
(`chorus-bench --algo` forces each algorithm in turn this way).

Chorus also reads the variables of the launchers it runs under:

| launcher | variables |
|---|---|
| chorus-run | `CHORUS_RANK CHORUS_SIZE CHORUS_LOCAL_RANK CHORUS_LOCAL_SIZE CHORUS_STORE_ADDR CHORUS_JOB_ID` (set for you) |
| torchrun, or by hand | `RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT` (under torchrun, whose own store holds `MASTER_PORT`, Chorus's store uses `MASTER_PORT+1`) |
| Open MPI `mpirun` | `OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE`; one host needs nothing more, several need `-x MASTER_ADDR -x MASTER_PORT` |
| MPICH / Hydra | `PMI_RANK PMI_SIZE MPI_LOCALRANKID MPI_LOCALNRANKS` |
| Slurm `srun` | `SLURM_PROCID SLURM_NTASKS SLURM_LOCALID SLURM_JOB_ID SLURM_STEP_ID SLURM_STEP_NODELIST`; across nodes the first node of the step serves the store on port 20000 + (31·job + step) mod 20000 unless `MASTER_ADDR`/`MASTER_PORT` are set |
| Kubernetes Indexed Job | `JOB_COMPLETION_INDEX` (the rank) with `WORLD_SIZE` (or `CHORUS_SIZE`) and no `RANK`/`CHORUS_RANK`; one rank per pod; rank 0 serves the store at `MASTER_ADDR:MASTER_PORT`, or, without `MASTER_ADDR`, at its own DNS name derived from the pod's `<job>-<index>.<subdomain>...` name, port `MASTER_PORT` or 29500 (docs/KUBERNETES.md) |

Horovod's variables are read for the Chorus setting they mean when that `CHORUS_*` variable
is not set (a job written for `horovodrun` keeps its settings); a bad value is reported under
the Horovod name, e.g. `invalid environment: HOROVOD_CYCLE_TIME=fast is not a non-negative number`:

| Horovod variable | read as |
|---|---|
| `HOROVOD_FUSION_THRESHOLD` (bytes) | `CHORUS_FUSION_THRESHOLD` |
| `HOROVOD_CYCLE_TIME` (ms) | `CHORUS_CYCLE_TIME_MS` |
| `HOROVOD_CACHE_CAPACITY` | `CHORUS_CACHE_CAPACITY` |
| `HOROVOD_STALL_CHECK_TIME_SECONDS` | `CHORUS_STALL_WARN_S` |
| `HOROVOD_STALL_CHECK_DISABLE=1` | `CHORUS_STALL_WARN_S=0` |
| `HOROVOD_STALL_SHUTDOWN_TIME_SECONDS` | `CHORUS_STALL_SHUTDOWN_S` |
| `HOROVOD_TIMELINE` (file) | `CHORUS_TIMELINE` (rank 0 writes it, as Horovod's coordinator); `HOROVOD_TIMELINE=DYNAMIC`, as in Horovod, starts none (the program calls `start_timeline(file)`) |
| `HOROVOD_AUTOTUNE` | `CHORUS_AUTOTUNE` (a search of algorithm, fusion threshold and cycle time in turn, not Horovod's Bayesian one) |
| `HOROVOD_RANK HOROVOD_SIZE HOROVOD_LOCAL_RANK ...` | set by chorus-run for scripts that read them |

Not read, since Chorus has nothing they would set: `HOROVOD_TIMELINE_MARK_CYCLES` (the
engine's trace always has a CYCLE event), `HOROVOD_AUTOTUNE_LOG` and the other `HOROVOD_AUTOTUNE_*` (use `CHORUS_AUTOTUNE_STEPS`, `CHORUS_AUTOTUNE_WARMUP` and `CHORUS_DEBUG=INFO`),
`HOROVOD_HIERARCHICAL_ALLREDUCE`/`_ALLGATHER` (the algorithm is chosen per topology,
`CHORUS_ALGO_ALLREDUCE`, ...), `HOROVOD_CPU_OPERATIONS`, `HOROVOD_CONTROLLER`, `HOROVOD_GLOO_*`,
`HOROVOD_MPI_*` (no MPI or Gloo underneath), `HOROVOD_GPU_*`, `HOROVOD_NCCL_*`,
`HOROVOD_NUM_NCCL_STREAMS`, `HOROVOD_BATCH_D2D_MEMCOPIES`, `HOROVOD_ENABLE_ASYNC_COMPLETION`
(no GPU path), `HOROVOD_ADASUM_MPI_CHUNK_SIZE`, `HOROVOD_LOG_LEVEL` (use `CHORUS_DEBUG`),
`HOROVOD_THREAD_AFFINITY`, `HOROVOD_DISABLE_GROUP_FUSION` and `HOROVOD_DYNAMIC_PROCESS_SETS`
(process sets are always dynamic).

| variable | default | type | meaning |
|---|---|---|---|
HEAD
"$BUILD/bin/chorus-run" --help-env | tail -n +2 | while IFS= read -r line; do
    name=$(echo "$line" | awk '{print $1}')
    def=$(echo "$line" | awk '{print $2}')
    type=$(echo "$line" | awk '{print $3}')
    help=$(echo "$line" | sed 's/^[^ ]* *[^ ]* *[^ ]* *//')
    [ "$def" = "-" ] && def=""
    printf '| `%s` | %s | %s | %s |\n' "$name" "${def:+\`$def\`}" "$type" "$help"
done
