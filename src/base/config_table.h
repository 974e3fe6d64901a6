/*
 * config_table.h - every CHORUS_* environment variable: name, default, help.
 * The one place to add a variable; `chorus-run --help-env` prints this table and
 * docs/ENVIRONMENT.md shows it.
 */
/* clang-format off */
CHORUS_CFG(CHORUS_DEBUG, NULL, "Log level: WARN, INFO or TRACE. Lines are prefixed with host, pid and rank.")
CHORUS_CFG(CHORUS_DEBUG_SUBSYS, "ALL", "Comma-separated subsystems to log: INIT,BOOT,COLL,TCP,SHM,ENGINE,ELASTIC or ALL.")
CHORUS_CFG(CHORUS_DEBUG_FILE, NULL, "Write log lines to this file instead of stderr; %h is replaced by the host, %p by the pid.")
CHORUS_CFG(CHORUS_TIMEOUT_S, "300", "Seconds any wait on a peer (rendezvous, connect, collective) may take before CHORUS_ERR_TIMEOUT.")
CHORUS_CFG(CHORUS_RANK, NULL, "This process's rank in the job (set by chorus-run).")
CHORUS_CFG(CHORUS_SIZE, NULL, "Number of ranks in the job (set by chorus-run).")
CHORUS_CFG(CHORUS_LOCAL_RANK, NULL, "Rank among the ranks on this host (set by chorus-run; computed when unset).")
CHORUS_CFG(CHORUS_LOCAL_SIZE, NULL, "Number of ranks on this host (set by chorus-run; computed when unset).")
CHORUS_CFG(CHORUS_STORE_ADDR, NULL, "host:port of the rendezvous key-value store. chorus-run serves one; otherwise rank 0 serves it at MASTER_ADDR:MASTER_PORT.")
CHORUS_CFG(CHORUS_JOB_ID, NULL, "Identifies the job in the store and in shared-memory names; set by chorus-run, derived from the launcher otherwise.")
CHORUS_CFG(CHORUS_IFACE, NULL, "Network interface or IPv4 address to listen on and advertise to peers (default: the address that routes to the store, or 127.0.0.1 on one host).")
CHORUS_CFG(CHORUS_SPIN_US, "50", "Microseconds a waiting rank polls before it sleeps in the kernel. Longer cuts small-message latency on machines with slow wake-ups, at the cost of CPU time.")
CHORUS_CFG(CHORUS_SOCKET_BUF, "4194304", "Socket send/receive buffer size in bytes.")
CHORUS_CFG(CHORUS_TCP_SEGMENT, "524288", "Pipeline segment in bytes for ring and chain algorithms over TCP.")
CHORUS_CFG(CHORUS_ALGO_ALLREDUCE, NULL, "Force the allreduce algorithm: rd (recursive doubling), ring, shm.")
CHORUS_CFG(CHORUS_ALGO_BROADCAST, NULL, "Force the broadcast algorithm: tree (binomial), chain (pipelined), shm.")
CHORUS_CFG(CHORUS_ALLREDUCE_RD_MAX, "65536", "Largest allreduce in bytes that uses recursive doubling over TCP; larger messages use the ring.")
CHORUS_CFG(CHORUS_BCAST_TREE_MAX, "262144", "Largest broadcast in bytes that uses the binomial tree over TCP; larger messages use the pipelined chain.")
CHORUS_CFG(CHORUS_MAX_MESSAGE, "17179869184", "Largest message in bytes a peer may announce; a longer header is treated as corrupt.")
CHORUS_CFG(CHORUS_CYCLE_TIME_MS, "2", "Engine: milliseconds between negotiation cycles while tensors are pending (a cycle starts at once when every cached tensor of a step is ready).")
CHORUS_CFG(CHORUS_FUSION_THRESHOLD, "67108864", "Engine: bytes of ready allreduces of one dtype and op packed into one fused allreduce; 0 disables fusion.")
CHORUS_CFG(CHORUS_CACHE_CAPACITY, "4096", "Engine: names kept in the response cache (agreed by one small allreduce instead of a coordinator round); 0 disables it.")
CHORUS_CFG(CHORUS_STALL_WARN_S, "60", "Engine: rank 0 warns (on stderr) about tensors submitted by some ranks but not others for this long, naming the missing ranks; 0 disables.")
CHORUS_CFG(CHORUS_STALL_SHUTDOWN_S, "0", "Engine: after a stall this long, every rank's pending ops fail with CHORUS_ERR_TIMEOUT and the engine stops; 0 means never.")
CHORUS_CFG(CHORUS_TIMELINE, NULL, "Engine: write a Chrome trace (open in Perfetto or chrome://tracing) of every tensor's negotiation, queueing, fusion copies and collective to this file; rank 0 writes it unless the name contains %r (the rank).")
CHORUS_CFG(CHORUS_ENGINE_IDLE_MS, "200", "Engine: heartbeat of an idle engine thread in milliseconds; bounds how long a rank waits for an idle peer to notice a shutdown or stall.")
CHORUS_CFG(CHORUS_COMPRESSION, "none", "Engine: default wire compression of float allreduces: none, fp16 or bf16.")
/* clang-format on */
