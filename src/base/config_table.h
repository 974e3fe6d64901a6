/*
 * config_table.h - every CHORUS_* environment variable: name, field, type, default, help.
 * The one place to add a variable: it becomes a field of chorus_config (base.h), parsed and
 * checked once (config.c); `chorus-run --help-env` prints this table and docs/ENVIRONMENT.md
 * shows it.
 *
 * Types (a value of the wrong form is an error naming the variable, never a silent default):
 *   STR     text (const char *; NULL when unset without a default)
 *   SECRET  text that is never logged
 *   INT     non-negative integer (long; -1 when unset without a default)
 *   DOUBLE  non-negative finite number (double)
 *   POSNUM  positive finite number (double): a duration that cannot be 0
 *   BOOL    0/1, true/false, yes/no or on/off (int 0 or 1)
 *   BYTES   non-negative size in bytes, optionally with a K, M or G suffix (powers of 1024)
 *   ENUM("a,b")  one of the listed names, any case (const char *: the listed spelling; NULL
 *                when unset)
 *   LIST("a,b")  comma-separated names of the list, any case (const char *: listed spellings)
 */
/* clang-format off */
#ifdef CHORUS_CFG
CHORUS_CFG(CHORUS_DEBUG, debug, ENUM("NONE,OFF,VERSION,ERROR,WARN,INFO,DEBUG,TRACE"), NULL, "Log level, any case: WARN (ERROR is the same: failures are returned to the caller, warnings logged); INFO adds the library version, the variables that are set and how each communicator is set up; TRACE (or DEBUG) adds every collective's algorithm and why it was chosen. VERSION prints the version only; NONE or OFF nothing. Unset: warnings only where a tool asks for them, and those a user must see anyway (a parameter server's reason for refusing a request, a worker it goes on without). Lines are prefixed with host, pid and rank.")
CHORUS_CFG(CHORUS_DEBUG_SUBSYS, debug_subsys, LIST("INIT,BOOT,COLL,TCP,SHM,ENGINE,ELASTIC,ALL"), "ALL", "Comma-separated subsystems to log: INIT,BOOT,COLL,TCP,SHM,ENGINE,ELASTIC or ALL.")
CHORUS_CFG(CHORUS_DEBUG_FILE, debug_file, STR, NULL, "Write log lines to this file instead of stderr; %h is replaced by the host, %p by the pid.")
CHORUS_CFG(CHORUS_TIMEOUT_S, timeout_s, POSNUM, "300", "Seconds any wait on a peer (rendezvous, connect, collective) may take before CHORUS_ERR_TIMEOUT.")
CHORUS_CFG(CHORUS_RANK, rank, INT, NULL, "This process's rank in the job (set by chorus-run).")
CHORUS_CFG(CHORUS_SIZE, size, INT, NULL, "Number of ranks in the job (set by chorus-run).")
CHORUS_CFG(CHORUS_LOCAL_RANK, local_rank, INT, NULL, "Rank among the ranks on this host (set by chorus-run; computed when unset).")
CHORUS_CFG(CHORUS_LOCAL_SIZE, local_size, INT, NULL, "Number of ranks on this host (set by chorus-run; computed when unset).")
CHORUS_CFG(CHORUS_STORE_ADDR, store_addr, STR, NULL, "host:port of the rendezvous key-value store. chorus-run serves one; otherwise rank 0 serves it at MASTER_ADDR:MASTER_PORT.")
CHORUS_CFG(CHORUS_JOB_ID, job_id, STR, NULL, "Identifies the job in the store and in shared-memory names; set by chorus-run, derived from the launcher otherwise.")
CHORUS_CFG(CHORUS_START_TIMEOUT_S, start_timeout_s, DOUBLE, "0", "Seconds the ranks wait for each other while a world forms (the rendezvous of chorus_init or of an elastic generation: every rank registered and connected) before CHORUS_ERR_TIMEOUT; 0 means CHORUS_TIMEOUT_S. chorus-run --start-timeout sets it, as horovodrun's does.")
CHORUS_CFG(CHORUS_IFACE, iface, STR, NULL, "Network interface or IPv4 address to listen on and advertise to peers (default: the address that routes to the store, or 127.0.0.1 on one host).")
CHORUS_CFG(CHORUS_SPIN_US, spin_us, INT, "50", "Microseconds a waiting rank polls before it sleeps in the kernel. Longer cuts small-message latency on machines with slow wake-ups, at the cost of CPU time.")
CHORUS_CFG(CHORUS_SECRET, secret, SECRET, NULL, "Per-job secret. Every store and transport connection proves it holds it (HMAC-SHA256 challenge-response, nonces from both sides) before anything else is read. chorus-run makes a random one; set the same value on every rank when launching with torchrun, mpirun or srun (unset: the job is unauthenticated, logged at INFO).")
CHORUS_CFG(CHORUS_BIND_ANY, bind_any, BOOL, "0", "1: a rank that serves the store (rank 0 under torchrun, mpirun, srun) listens on every address instead of only the store address's (MASTER_ADDR) or CHORUS_IFACE's.")
CHORUS_CFG(CHORUS_HEARTBEAT_S, heartbeat_s, DOUBLE, "1", "Seconds between keep-alive pings on idle connections; a watchdog thread sends them and reads pending data. 0 turns it off (then a hung peer is found only by CHORUS_TIMEOUT_S). When CHORUS_TIMEOUT_S caps the heartbeat timeout, at most a quarter of it.")
CHORUS_CFG(CHORUS_HEARTBEAT_TIMEOUT_S, heartbeat_timeout_s, POSNUM, "30", "A peer from which nothing, not even a ping, arrived for this many seconds is lost (hung, stopped, unreachable) on every survivor; capped at CHORUS_TIMEOUT_S. A parameter server's worker in async or SSP mode is lost at this or at CHORUS_TIMEOUT_S, whichever sees its silence first.")
CHORUS_CFG(CHORUS_ELASTIC, elastic, BOOL, NULL, "Set to 1 by chorus-run --elastic: chorus_elastic_run then re-forms the job after a failure or a membership change instead of returning the error.")
CHORUS_CFG(CHORUS_WORKER_ID, worker_id, INT, NULL, "Stable id of this worker process in an elastic job (set by chorus-run --elastic; ranks change between generations, worker ids do not).")
CHORUS_CFG(CHORUS_BIND, bind, ENUM("core,none"), "core", "chorus-run: none leaves the ranks unpinned, as --bind-to none does; core pins each rank to its own block of CPUs when there are at least as many as ranks.")
CHORUS_CFG(CHORUS_SOCKET_BUF, socket_buf, BYTES, "4194304", "Socket send/receive buffer size in bytes.")
CHORUS_CFG(CHORUS_TCP_SEGMENT, tcp_segment, BYTES, "524288", "Pipeline segment in bytes for ring and chain algorithms over TCP.")
CHORUS_CFG(CHORUS_TCP_LANES, tcp_lanes, INT, "1", "TCP connections (lanes) per pair of ranks, 1 to 64. A message of 64 KiB or more is striped across them in equal contiguous slices (its header and first slice on the first lane, so message order is unchanged); more lanes help where one connection cannot fill a link. Every rank of a job must use the same value (a connection with another count is refused). A lane that fails is the peer lost.")
CHORUS_CFG(CHORUS_ALGO_ALLREDUCE, algo_allreduce, STR, NULL, "Force the allreduce algorithm: oneshot or direct_ring (TCP, rank-order fold: the defaults by size), rd (recursive doubling), ring (ring reduce-scatter + allgather: only neighbour links and two slices of scratch, for networks where many concurrent peers congest or memory is short; folds in ring order), shm (shared memory, variant by size), shm_oneshot (every rank reduces everything; shm_flat is an accepted older name), shm_pipelined (reduce-scatter + allgather through the slots) or hier (across hosts: shared memory within each host, TCP between them; the default where some host has several ranks). Another value makes the collective return CHORUS_ERR_INVALID_ARG listing these.")
CHORUS_CFG(CHORUS_ALGO_BROADCAST, algo_broadcast, STR, NULL, "Force the broadcast algorithm: tree (binomial), chain (pipelined), shm or hier (across hosts: shared memory within each host, TCP among the hosts' lowest ranks). Another value: CHORUS_ERR_INVALID_ARG.")
CHORUS_CFG(CHORUS_ALGO_ALLGATHER, algo_allgather, STR, NULL, "Force the allgather algorithm: ring (TCP), shm or hier (across hosts: shared memory within each host, TCP among the hosts' lowest ranks). Another value: CHORUS_ERR_INVALID_ARG.")
CHORUS_CFG(CHORUS_ALGO_REDUCE_SCATTER, algo_reduce_scatter, STR, NULL, "Force the reduce-scatter algorithm: direct (TCP: each rank receives its block from every rank and folds in rank order) or shm. Another value: CHORUS_ERR_INVALID_ARG.")
CHORUS_CFG(CHORUS_ALGO_ALLTOALL, algo_alltoall, STR, NULL, "Force the alltoall algorithm: pairwise (TCP) or shm. Another value: CHORUS_ERR_INVALID_ARG.")
CHORUS_CFG(CHORUS_ALGO_BARRIER, algo_barrier, STR, NULL, "Force the barrier algorithm: dissemination (TCP) or shm. Another value: CHORUS_ERR_INVALID_ARG.")
CHORUS_CFG(CHORUS_SHM, shm, BOOL, "1", "0 turns shared memory off: ranks on one host then talk over TCP (to test or measure that path). Shared memory serves communicators whose ranks are all on one host: the world of a one-host job, or a chorus_comm_split_type(CHORUS_SPLIT_HOST) communicator of a multi-host job. Every rank of a job must use the same value (a difference fails the set-up on every rank, naming the variable).")
CHORUS_CFG(CHORUS_SHM_CHUNK, shm_chunk, BYTES, "1048576", "Bytes per shared-memory staging slot (two per rank): the pipeline chunk of large shared-memory collectives. Unset: 1 MiB, less for groups above 16 ranks so that the slots take at most 32 MiB (never under 256 KiB).")
CHORUS_CFG(CHORUS_SHM_ONESHOT_MAX, shm_oneshot_max, BYTES, "65536", "With more than 2 ranks, the largest allreduce in bytes in which every rank reduces everything over shared memory (shm_oneshot); larger ones are pipelined reduce-scatter + allgather (shm_pipelined). 2 ranks always use shm_oneshot.")
CHORUS_CFG(CHORUS_SHM_SPIN_US, shm_spin_us, INT, "500", "Microseconds a rank spins on a shared-memory flag before sleeping on a futex; more than a CPU takes to wake (~100 us in a VM). Ranks outnumbering cores yield the core between polls.")
CHORUS_CFG(CHORUS_SHM_NT_MIN, shm_nt_min, BYTES, "33554432", "Shared-memory collectives whose output is at least this many bytes write it with non-temporal stores (0: never).")
CHORUS_CFG(CHORUS_SHM_CMA, shm_cma, ENUM("auto,0,1"), "auto", "Single-copy allreduce between ranks of one host (Linux cross-memory attach, process_vm_readv): auto uses it for 2 ranks (more with CHORUS_ALGO_ALLREDUCE=shm_cma) when every rank can read and write every other (probed once per communicator; with Yama ptrace_scope 1 each rank allows this with PR_SET_PTRACER_ANY), 0 never, 1 requires it (set-up fails if the kernel refuses). Every rank of a job must use the same value (a difference fails the communicator's set-up on every rank, naming the variable).")
CHORUS_CFG(CHORUS_SHM_CMA_MIN, shm_cma_min, BYTES, "12288", "Smallest allreduce in bytes that uses single-copy transfers (2 ranks, when available); smaller ones go through the staging slots.")
CHORUS_CFG(CHORUS_SHM_CMA_MAX, shm_cma_max, BYTES, "393216", "Largest allreduce in bytes that always uses single-copy transfers at 2 ranks. Unset, larger ones are measured per size class (powers of two) against the pipelined staging slots in their first calls, and each class takes the faster on this host from then on; set, larger ones always go through the slots.")
CHORUS_CFG(CHORUS_SHM_CMA_PIECE, shm_cma_piece, BYTES, "262144", "Bytes per single-copy read of a peer's buffer (the piece reduced while it is in cache).")
CHORUS_CFG(CHORUS_TCP_READY_MIN, tcp_ready_min, BYTES, "1048576", "Direct reduce-scatter over TCP (the large allreduce and reduce-scatter): from this many bytes per rank's slice, every rank first posts all its receives and tells each peer so in an empty message, and sends its data only once the peer said it is ready, so that no data arrives before its receive and is buffered and copied a second time (a one-way latency more per call). Every rank of a job must use the same value (ranks that differ fail the call as mismatched, naming both).")
CHORUS_CFG(CHORUS_TCP_ONESHOT_MAX, tcp_oneshot_max, BYTES, "32768", "Largest allreduce in bytes done one-shot over TCP (every rank sends its buffer to every other); larger ones are a direct reduce-scatter and a ring allgather.")
CHORUS_CFG(CHORUS_BCAST_TREE_MAX, bcast_tree_max, BYTES, "262144", "Largest broadcast in bytes that uses the binomial tree over TCP; larger messages use the pipelined chain.")
CHORUS_CFG(CHORUS_MAX_MESSAGE, max_message, BYTES, "17179869184", "Largest message in bytes a peer may announce; a longer header is treated as corrupt.")
CHORUS_CFG(CHORUS_CYCLE_TIME_MS, cycle_time_ms, DOUBLE, "2", "Engine: milliseconds between negotiation cycles while tensors are pending (a cycle starts at once when every cached tensor of a step is ready).")
CHORUS_CFG(CHORUS_FUSION_THRESHOLD, fusion_threshold, BYTES, "67108864", "Engine: bytes of ready allreduces of one dtype and op packed into one fused allreduce; 0 disables fusion.")
CHORUS_CFG(CHORUS_CACHE_CAPACITY, cache_capacity, INT, "4096", "Engine: names kept in the response cache (agreed by one small allreduce instead of a coordinator round); 0 disables it.")
CHORUS_CFG(CHORUS_STALL_WARN_S, stall_warn_s, DOUBLE, "60", "Engine: rank 0 warns (on stderr) about tensors submitted by some ranks but not others for this long, naming the missing ranks; 0 disables.")
CHORUS_CFG(CHORUS_DESYNC_S, desync_s, DOUBLE, "3", "Engine: when every rank has been blocked this long waiting for ops that some other rank never submitted (the ranks issued different collectives), those ops fail on every rank with CHORUS_ERR_MISMATCH naming each op and the ranks missing it; 0 disables.")
CHORUS_CFG(CHORUS_STALL_SHUTDOWN_S, stall_shutdown_s, DOUBLE, "0", "Engine: after a stall this long, every rank's pending ops fail with CHORUS_ERR_TIMEOUT and the engine stops; 0 means never.")
CHORUS_CFG(CHORUS_TIMELINE, timeline, STR, NULL, "Write a Chrome trace (open in Perfetto or chrome://tracing) to this file: an event per collective of every communicator (name, bytes, algorithm, start and duration), whoever calls it, and with the engine each tensor's negotiation, queueing, fusion copies and collective; rank 0 writes it unless the name contains %r (the rank). A file that cannot be written is a warning naming it (the engine refuses to start).")
CHORUS_CFG(CHORUS_TENSORBOARD, tensorboard, STR, NULL, "Directory of TensorBoard event files: scalars logged with chorus_log_scalar (C) or chorus.log_scalar (Python) go to DIR/rank<k>/ for rank k. Unset: they are dropped.")
CHORUS_CFG(CHORUS_ENGINE_IDLE_MS, engine_idle_ms, POSNUM, "200", "Engine: heartbeat of an idle engine thread in milliseconds; bounds how long a rank waits for an idle peer to notice a shutdown or stall.")
CHORUS_CFG(CHORUS_ENGINE_WAIT_SPIN_US, engine_wait_spin_us, INT, "300", "Engine: microseconds a thread waiting for an op (chorus_engine_wait, synchronize()) polls it, yielding the core between polls, before it sleeps: the engine thread it waits for often runs on the same core, and a sleeping thread on a loaded or virtual machine can take ~100 us or a time slice of another process to wake. 0: sleep at once.")
CHORUS_CFG(CHORUS_COMPRESSION, compression, ENUM("none,fp16,bf16"), "none", "Engine: default wire compression of float allreduces: none, fp16 or bf16.")
CHORUS_CFG(CHORUS_AUTOTUNE, autotune, BOOL, "0", "Engine: 1 tries, in the first steps of training, the allreduce algorithms this communicator has (shared-memory variants on one host, hierarchical or flat across hosts, TCP variants otherwise; not when CHORUS_ALGO_ALLREDUCE forces one), then fusion thresholds (0 to 64 MiB), then cycle times (0.5 to 5 ms), each over CHORUS_AUTOTUNE_STEPS steps, keeps the fastest and logs the candidates with their step times and the choice (rank 0, on stderr). Rank 0 measures and decides for every rank; rank 0's tuning settings are used everywhere.")
CHORUS_CFG(CHORUS_AUTOTUNE_STEPS, autotune_steps, INT, "3", "Engine, with CHORUS_AUTOTUNE=1: measured steps per candidate, 1 to 100 (after one step to settle); the candidate's time is the median step time.")
CHORUS_CFG(CHORUS_AUTOTUNE_WARMUP, autotune_warmup, INT, "2", "Engine, with CHORUS_AUTOTUNE=1: steps run with the starting settings before the first candidate (the first steps are slower: names are negotiated, buffers grow), 0 to 1000.")
CHORUS_CFG(CHORUS_STATUS_FD, status_fd, INT, NULL, "Set by chorus-run: a pipe on which the library reports the first failure of this rank's communication and the peer it blames, so that the launcher names the rank that failed first.")
CHORUS_CFG(CHORUS_PS_SERVERS, ps_servers, INT, NULL, "Parameter server: how many of the first ranks serve (set by chorus-run --servers K); the default of chorus_ps_opts_default, which a program may override. Unset: 1.")
#endif
/* clang-format on */
/*
 * The variables that describe the job, as the launcher that started the process sets them:
 * CHORUS_JOB_VAR(name, who sets it). They are read together, as text, each time a job is
 * formed (chorus__job_vars_read), and src/bootstrap/env.c works out the launcher, rank, world
 * and meeting point from them; the CHORUS_* ones among them are rows of the table above too
 * (help, and the process-wide config).
 */
/* clang-format off */
#ifdef CHORUS_JOB_VAR
CHORUS_JOB_VAR(CHORUS_RANK, "chorus-run")
CHORUS_JOB_VAR(CHORUS_SIZE, "chorus-run")
CHORUS_JOB_VAR(CHORUS_LOCAL_RANK, "chorus-run")
CHORUS_JOB_VAR(CHORUS_LOCAL_SIZE, "chorus-run")
CHORUS_JOB_VAR(CHORUS_STORE_ADDR, "chorus-run, or set by hand")
CHORUS_JOB_VAR(CHORUS_JOB_ID, "chorus-run, or set by hand")
CHORUS_JOB_VAR(RANK, "torchrun")
CHORUS_JOB_VAR(WORLD_SIZE, "torchrun, a Kubernetes manifest")
CHORUS_JOB_VAR(LOCAL_RANK, "torchrun")
CHORUS_JOB_VAR(LOCAL_WORLD_SIZE, "torchrun")
CHORUS_JOB_VAR(MASTER_ADDR, "torchrun, or set by hand")
CHORUS_JOB_VAR(MASTER_PORT, "torchrun, or set by hand")
CHORUS_JOB_VAR(TORCHELASTIC_RUN_ID, "torchrun")
CHORUS_JOB_VAR(TORCHELASTIC_USE_AGENT_STORE, "torchrun")
CHORUS_JOB_VAR(OMPI_COMM_WORLD_RANK, "Open MPI's mpirun")
CHORUS_JOB_VAR(OMPI_COMM_WORLD_SIZE, "Open MPI's mpirun")
CHORUS_JOB_VAR(OMPI_COMM_WORLD_LOCAL_RANK, "Open MPI's mpirun")
CHORUS_JOB_VAR(OMPI_COMM_WORLD_LOCAL_SIZE, "Open MPI's mpirun")
CHORUS_JOB_VAR(OMPI_MCA_ess_base_jobid, "Open MPI's mpirun")
CHORUS_JOB_VAR(PMIX_NAMESPACE, "a PMIx launcher")
CHORUS_JOB_VAR(PMI_RANK, "MPICH/Hydra")
CHORUS_JOB_VAR(PMI_SIZE, "MPICH/Hydra")
CHORUS_JOB_VAR(MPI_LOCALRANKID, "MPICH/Hydra")
CHORUS_JOB_VAR(MPI_LOCALNRANKS, "MPICH/Hydra")
CHORUS_JOB_VAR(PMI_KVSNAME, "MPICH/Hydra")
CHORUS_JOB_VAR(SLURM_PROCID, "srun")
CHORUS_JOB_VAR(SLURM_NTASKS, "srun")
CHORUS_JOB_VAR(SLURM_STEP_NUM_TASKS, "srun")
CHORUS_JOB_VAR(SLURM_LOCALID, "srun")
CHORUS_JOB_VAR(SLURM_JOB_ID, "srun")
CHORUS_JOB_VAR(SLURM_STEP_ID, "srun")
CHORUS_JOB_VAR(SLURM_STEP_NUM_NODES, "srun")
CHORUS_JOB_VAR(SLURM_NNODES, "srun")
CHORUS_JOB_VAR(SLURM_STEP_NODELIST, "srun")
CHORUS_JOB_VAR(SLURM_JOB_NODELIST, "srun")
CHORUS_JOB_VAR(JOB_COMPLETION_INDEX, "a Kubernetes Indexed Job")
CHORUS_JOB_VAR(PET_NNODES, "torchrun's flags as variables (chorus-run --nnodes reads them)")
CHORUS_JOB_VAR(PET_NPROC_PER_NODE, "torchrun's flags as variables")
CHORUS_JOB_VAR(PET_NODE_RANK, "torchrun's flags as variables")
CHORUS_JOB_VAR(PET_MASTER_ADDR, "torchrun's flags as variables")
CHORUS_JOB_VAR(PET_MASTER_PORT, "torchrun's flags as variables")
CHORUS_JOB_VAR(TMPDIR, "the system (where a one-host job's rendezvous file goes)")
#endif
/* clang-format on */
