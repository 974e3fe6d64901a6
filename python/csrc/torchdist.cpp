/*
 * torchdist.cpp - the torch.distributed backend "chorus": a process group whose collectives
 * and point-to-point calls are libchorus's (include/chorus.h). It only adapts torch tensors to
 * the C API: a contiguous CPU buffer, a chorus dtype and op, and libchorus's error text as a
 * RuntimeError.
 *
 * Each group runs its collectives in order on a worker thread of its own (the caller gets a
 * c10d::Work at once, with wait() and a future), on a communicator of its own: the world's
 * from chorus_init, a subgroup's from chorus_comm_create_group. Point-to-point calls use a
 * second communicator of the same ranks, started in the caller's thread, so a pending irecv
 * never holds up the collectives queued behind it. Python (chorus/torch/distributed.py)
 * creates the groups and registers the backend.
 */
#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/utils/pybind.h>

#include "chorus.h"
#include "torch_compat.h"

namespace chorus_td
{

using c10d::OpType;
using c10d::Work;
using WorkPtr = c10::intrusive_ptr<Work>;
using Tensors = std::vector<at::Tensor>;

/* ---- libchorus errors as RuntimeError -------------------------------------------------- */

[[noreturn]] static void fail(const chorus_comm *c, chorus_result r, const char *call)
{
    throw std::runtime_error(std::string("chorus: ") + call + " failed: " + chorus_result_name(r) +
                             ": " + chorus_last_error(c));
}

#define CHECK_CHORUS(comm, call, name)                                                             \
    do {                                                                                           \
        chorus_result r_ = (call);                                                                 \
        if (r_ != CHORUS_OK) fail(comm, r_, name);                                                 \
    } while (0)

/* ---- tensors as buffers ----------------------------------------------------------------- */

/* How a tensor travels: its chorus dtype and element count, or, for a dtype libchorus does not
 * reduce (bool, int16, complex), as bytes. */
struct Buf {
    chorus_dtype dt;
    size_t count;
    bool bytes;
};

static Buf buf_of(const at::Tensor &t)
{
    size_t n = (size_t)t.numel();
    switch (t.scalar_type()) {
    case at::kFloat: return {CHORUS_FLOAT32, n, false};
    case at::kDouble: return {CHORUS_FLOAT64, n, false};
    case at::kHalf: return {CHORUS_FLOAT16, n, false};
    case at::kBFloat16: return {CHORUS_BFLOAT16, n, false};
    case at::kInt: return {CHORUS_INT32, n, false};
    case at::kLong: return {CHORUS_INT64, n, false};
    case at::kChar: return {CHORUS_INT8, n, false};
    case at::kByte: return {CHORUS_UINT8, n, false};
    default: return {CHORUS_UINT8, n * t.element_size(), true};
    }
}

/* torch's name of a reduce op, for messages. */
static const char *op_name(c10d::ReduceOp::RedOpType kind)
{
    switch (kind) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "UNUSED";
    }
}

/* A torch reduce op as libchorus runs it: a chorus op, and for PREMUL_SUM the factor each
 * rank's input is multiplied by before the sum (a number or a one-element tensor). */
struct Reduction {
    Reduction(chorus_op o) : op(o) {}
    chorus_op op;
    bool premul = false;
    double factor = 1.0;
    at::Tensor tensor_factor;
};

static Reduction reduction_of(const c10d::ReduceOp &rop, const at::Tensor &t, const char *call)
{
    auto kind = static_cast<c10d::ReduceOp::RedOpType>(rop);
    bool bitwise =
        kind == c10d::ReduceOp::BAND || kind == c10d::ReduceOp::BOR || kind == c10d::ReduceOp::BXOR;
    at::ScalarType st = t.scalar_type();
    if (bitwise) {
        TORCH_CHECK(at::isIntegralType(st, /*includeBool=*/true), "chorus: ", call, ": ReduceOp.",
                    op_name(kind), " needs an integer or bool tensor, got ", st);
        TORCH_CHECK(st != at::kShort, "chorus: ", call, ": cannot reduce tensors of dtype ", st,
                    " (int8/32/64, uint8 and bool can be with ReduceOp.", op_name(kind), ")");
        return {kind == c10d::ReduceOp::BAND  ? CHORUS_BAND
                : kind == c10d::ReduceOp::BOR ? CHORUS_BOR
                                              : CHORUS_BXOR};
    }
    if (st == at::kBool) { /* or and and, as Gloo does them */
        if (kind == c10d::ReduceOp::SUM || kind == c10d::ReduceOp::MAX) return {CHORUS_MAX};
        if (kind == c10d::ReduceOp::PRODUCT || kind == c10d::ReduceOp::MIN) return {CHORUS_MIN};
    } else if (buf_of(t).bytes) {
        TORCH_CHECK(false, "chorus: ", call, ": cannot reduce tensors of dtype ", st,
                    " (float32/64, float16, bfloat16, int8/32/64, uint8 and bool can be)");
    }
    /* Gloo computes an average by dividing in place, which fails on integers */
    TORCH_CHECK(kind != c10d::ReduceOp::AVG || at::isFloatingType(st), "chorus: ", call,
                ": ReduceOp.AVG needs a floating-point tensor, got ", st);
    switch (kind) {
    case c10d::ReduceOp::SUM: return {CHORUS_SUM};
    case c10d::ReduceOp::AVG: return {CHORUS_AVG};
    case c10d::ReduceOp::PRODUCT: return {CHORUS_PROD};
    case c10d::ReduceOp::MIN: return {CHORUS_MIN};
    case c10d::ReduceOp::MAX: return {CHORUS_MAX};
    case c10d::ReduceOp::PREMUL_SUM: {
        TORCH_CHECK(at::isFloatingType(st), "chorus: ", call,
                    ": ReduceOp.PREMUL_SUM needs a floating-point tensor, got ", st);
        Reduction r{CHORUS_SUM};
        r.premul = true;
        auto *sup = dynamic_cast<PreMulSupplement *>(rop.supplement_.get());
        TORCH_CHECK(sup, "chorus: ", call, ": ReduceOp.PREMUL_SUM without its factor");
        r.factor = sup->double_factor;
        r.tensor_factor = premul_tensor(*sup);
        return r;
    }
    default:
        TORCH_CHECK(false, "chorus: ", call, ": ReduceOp.", op_name(kind), " on ", st,
                    " is not supported (SUM, AVG, PRODUCT, MIN, MAX, PREMUL_SUM; BAND, BOR and "
                    "BXOR on integers and bool are)");
    }
}

/* in as a PREMUL_SUM sends it: multiplied by the factor, in its own dtype (in itself for other
 * ops). */
static at::Tensor premultiplied(const at::Tensor &in, const Reduction &r)
{
    if (!r.premul) return in;
    if (r.tensor_factor.defined()) return at::mul(in, r.tensor_factor.to(in.scalar_type()));
    return at::mul(in, r.factor);
}

static void check_cpu(const at::Tensor &t)
{
    TORCH_CHECK(t.device().is_cpu(), "chorus: tensors must be on the CPU, got one on ", t.device());
    TORCH_CHECK(!t.is_sparse(), "chorus: sparse tensors are not supported; use .to_dense()");
}

static void check_cpu(const Tensors &ts)
{
    for (const auto &t : ts) check_cpu(t);
}

/* A contiguous view of t for the duration of a call; what was written to it goes back to t
 * when t itself was not contiguous. */
struct Dense {
    at::Tensor orig, buf;
    explicit Dense(const at::Tensor &t) : orig(t), buf(t.is_contiguous() ? t : t.contiguous()) {}
    void *ptr() const
    {
        return buf.data_ptr();
    }
    void put_back()
    {
        if (!buf.is_same(orig)) orig.copy_(buf);
    }
};

static void check_same(const at::Tensor &a, const at::Tensor &b, const char *what)
{
    TORCH_CHECK(a.scalar_type() == b.scalar_type() && a.numel() == b.numel(), "chorus: ", what,
                ": every tensor must have the input's dtype and size (", a.scalar_type(), ", ",
                a.numel(), " elements), got ", b.scalar_type(), ", ", b.numel());
}

/* ---- the work handle ---------------------------------------------------------------------- */

/* A collective queued on a group's worker: done() completes the future (its value the output
 * tensors) and the base class's wait(), or fails both with the error. */
class CollWork : public Work
{
  public:
    CollWork(OpType type, Tensors outputs)
        : Work(-1, type), outputs_(std::move(outputs)),
          future_(c10::make_intrusive<c10::ivalue::Future>(
              c10::ListType::create(c10::TensorType::get())))
    {
    }
    void done(std::exception_ptr e)
    {
        if (e)
            future_->setError(e);
        else
            future_->markCompleted(c10::IValue(outputs_));
        finish(e);
    }
    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override
    {
        return future_;
    }
    Tensors result() override
    {
        return outputs_;
    }

  private:
    Tensors outputs_;
    c10::intrusive_ptr<c10::ivalue::Future> future_;
};

/* A send or receive in flight on the point-to-point communicator. wait() and isCompleted()
 * finish it; a receive from any source then knows its sender. */
class P2PWork : public Work
{
  public:
    P2PWork(OpType type, chorus_comm *c, chorus_request *req, Dense buf, size_t count)
        : Work(-1, type), comm_(c), req_(req), buf_(std::move(buf)), count_(count),
          send_(type == OpType::SEND)
    {
    }
    ~P2PWork() override
    {
        if (req_) chorus_wait(req_, nullptr);
    }
    bool isCompleted() override
    {
        std::lock_guard<std::mutex> g(p2p_mu_);
        if (req_) {
            int done = 0;
            chorus_status st;
            chorus_result r = chorus_test(req_, &done, &st);
            if (done) end(r, st);
        }
        return Work::isCompleted();
    }
    /* With a timeout, polls until then and raises if the message has not come (the request
     * stays pending: a later wait may still complete it); without, waits as long as the
     * communicator's deadline allows. */
    bool wait(std::chrono::milliseconds timeout) override
    {
        {
            std::lock_guard<std::mutex> g(p2p_mu_);
            auto deadline = std::chrono::steady_clock::now() + timeout;
            while (req_ && timeout != kNoTimeout) {
                int done = 0;
                chorus_status st;
                chorus_result r = chorus_test(req_, &done, &st);
                if (done) {
                    end(r, st);
                    break;
                }
                TORCH_CHECK(std::chrono::steady_clock::now() < deadline,
                            "chorus: ", send_ ? "send" : "recv", " did not complete within ",
                            timeout.count(), " ms");
                std::this_thread::sleep_for(std::chrono::microseconds(200));
            }
            if (req_) {
                chorus_status st;
                end(chorus_wait(req_, &st), st);
            }
        }
        return Work::wait(timeout);
    }
    int sourceRank() const override
    {
        return source_;
    }
    Tensors result() override
    {
        return {buf_.orig};
    }

  private:
    void end(chorus_result r, const chorus_status &st)
    {
        req_ = nullptr;
        std::exception_ptr e;
        try {
            if (r != CHORUS_OK) fail(comm_, r, send_ ? "send" : "recv");
            if (!send_ && st.count != count_)
                TORCH_CHECK(false, "chorus: recv: rank ", st.source, " sent ", st.count,
                            " elements, the receive expected ", count_);
            source_ = st.source;
            buf_.put_back();
        } catch (...) {
            e = std::current_exception();
        }
        finish(e);
    }
    chorus_comm *comm_;
    chorus_request *req_;
    Dense buf_;
    size_t count_;
    bool send_;
    int source_ = -1;
    std::mutex p2p_mu_;
};

/* ---- the backend ------------------------------------------------------------------------ */

/* Tags of the point-to-point twin of a group and of a split, apart from any group name's hash. */
static const uint64_t P2P_TAG = 0x7032702d74776e31ull;
static const uint64_t SPLIT_TAG = 0x73706c6974677270ull;

class ChorusBackend;
static c10::intrusive_ptr<ChorusBackend> subgroup(chorus_comm *c, const std::vector<int> &ranks,
                                                  uint64_t tag);

class ChorusBackend : public BackendBase
{
  public:
    /* Takes ownership of coll and p2p (communicators of the same ranks). */
    ChorusBackend(chorus_comm *coll, chorus_comm *p2p)
        : BackendBase(chorus_rank(coll), chorus_size(coll)), coll_(coll), p2p_(p2p)
    {
        std::lock_guard<std::mutex> g(mu_); /* run() checks active_ under it */
        worker_ = std::thread([this] { run(); });
        active_ = worker_.get_id();
    }

    ~ChorusBackend() override
    {
        {
            std::lock_guard<std::mutex> g(mu_);
            stop_ = true;
        }
        cv_.notify_all();
        /* A future's callbacks run on the completer and may need the GIL (a Python comm
         * hook): the destructor, run by Python's garbage collection, must not hold it while it
         * waits (torch 1.13's Gloo group deadlocks there). */
        if (Py_IsInitialized() && PyGILState_Check()) {
            pybind11::gil_scoped_release nogil;
            join_workers();
        } else {
            join_workers();
        }
        finished_.clear();
        chorus_finalize(p2p_);
        chorus_finalize(coll_);
    }

    const std::string getBackendName() const override
    {
        return "chorus";
    }

    /* The communicator that subgroups are made from (the world's). */
    chorus_comm *comm() const
    {
        return coll_;
    }

    WorkPtr broadcast(Tensors &ts, const c10d::BroadcastOptions &o) override
    {
        check_cpu(ts);
        TORCH_CHECK(ts.size() == 1, "chorus: broadcast takes one tensor per rank");
        int root = (int)o.rootRank;
        return enqueue(OpType::BROADCAST, ts, [this, ts, root] {
            Dense d(ts[0]);
            Buf b = buf_of(ts[0]);
            CHECK_CHORUS(coll_, chorus_broadcast(coll_, d.ptr(), b.count, b.dt, root), "broadcast");
            d.put_back();
        });
    }

    WorkPtr allreduce(Tensors &ts, const c10d::AllreduceOptions &o) override
    {
        check_cpu(ts);
        std::vector<Reduction> rs;
        for (auto &t : ts) rs.push_back(reduction_of(o.reduceOp, t, "all_reduce"));
        return enqueue(OpType::ALLREDUCE, ts, [this, ts, rs] {
            for (size_t i = 0; i < ts.size(); i++)
                reduce_into(premultiplied(ts[i], rs[i]), ts[i], rs[i].op);
        });
    }

    WorkPtr allreduce_coalesced(Tensors &ts, const c10d::AllreduceCoalescedOptions &o) override
    {
        return allreduce(ts, o);
    }

    WorkPtr reduce(Tensors &ts, const c10d::ReduceOptions &o) override
    {
        check_cpu(ts);
        TORCH_CHECK(ts.size() == 1, "chorus: reduce takes one tensor per rank");
        Reduction red = reduction_of(o.reduceOp, ts[0], "reduce");
        int root = (int)o.rootRank;
        return enqueue(OpType::REDUCE, ts, [this, ts, red, root] {
            /* libchorus has no rooted reduce: the others reduce into a scratch copy */
            at::Tensor out = rank_ == root ? ts[0] : at::empty_like(ts[0]);
            reduce_into(premultiplied(ts[0], red), out, red.op);
        });
    }

    WorkPtr allgather(std::vector<Tensors> &outs, Tensors &ins,
                      const c10d::AllgatherOptions &) override
    {
        check_cpu(ins);
        TORCH_CHECK(ins.size() == 1 && outs.size() == 1,
                    "chorus: allgather takes one input and one output list per rank");
        TORCH_CHECK((int)outs[0].size() == size_, "chorus: allgather: the output list has ",
                    outs[0].size(), " tensors for a group of ", size_);
        for (auto &t : outs[0]) check_same(ins[0], t, "allgather");
        Tensors out = outs[0];
        at::Tensor in = ins[0];
        return enqueue(OpType::ALLGATHER, out, [this, out, in] {
            at::Tensor flat = gather_flat(in);
            for (int r = 0; r < size_; r++) out[r].copy_(flat[r].view_as(out[r]));
        });
    }

    WorkPtr _allgather_base(at::Tensor &out, at::Tensor &in,
                            const c10d::AllgatherOptions &) override
    {
        check_gather_sizes(out, in);
        return enqueue(OpType::_ALLGATHER_BASE, {out}, [this, out, in] {
            Dense o(out);
            gather_into(in, o.ptr());
            o.put_back();
        });
    }

    WorkPtr allgather_coalesced(std::vector<Tensors> &outs, Tensors &ins,
                                const c10d::AllgatherOptions &) override
    {
        check_cpu(ins);
        TORCH_CHECK((int)outs.size() == size_, "chorus: allgather_coalesced: ", outs.size(),
                    " output lists for a group of ", size_);
        for (auto &l : outs) {
            TORCH_CHECK(l.size() == ins.size(), "chorus: allgather_coalesced: each output list "
                                                "must have one tensor per input");
            for (size_t i = 0; i < ins.size(); i++) check_same(ins[i], l[i], "allgather_coalesced");
        }
        std::vector<Tensors> o = outs;
        Tensors all;
        for (auto &l : outs) all.insert(all.end(), l.begin(), l.end());
        return enqueue(OpType::ALLGATHER_COALESCED, all, [this, o, ins] {
            for (size_t i = 0; i < ins.size(); i++) {
                at::Tensor flat = gather_flat(ins[i]);
                for (int r = 0; r < size_; r++) o[r][i].copy_(flat[r].view_as(o[r][i]));
            }
        });
    }

    WorkPtr gather(std::vector<Tensors> &outs, Tensors &ins, const c10d::GatherOptions &o) override
    {
        check_cpu(ins);
        TORCH_CHECK(ins.size() == 1, "chorus: gather takes one input tensor per rank");
        int root = (int)o.rootRank;
        Tensors out;
        if (rank_ == root) {
            TORCH_CHECK(outs.size() == 1 && (int)outs[0].size() == size_,
                        "chorus: gather: the root needs a list of ", size_, " output tensors");
            for (auto &t : outs[0]) check_same(ins[0], t, "gather");
            out = outs[0];
        } else {
            TORCH_CHECK(outs.empty() || outs[0].empty(),
                        "chorus: gather: only the root passes output tensors");
        }
        at::Tensor in = ins[0];
        return enqueue(OpType::GATHER, out, [this, out, in] {
            at::Tensor flat = gather_flat(in);
            for (size_t r = 0; r < out.size(); r++) out[r].copy_(flat[r].view_as(out[r]));
        });
    }

    WorkPtr scatter(Tensors &outs, std::vector<Tensors> &ins,
                    const c10d::ScatterOptions &o) override
    {
        check_cpu(outs);
        TORCH_CHECK(outs.size() == 1, "chorus: scatter takes one output tensor per rank");
        int root = (int)o.rootRank;
        Tensors in;
        if (rank_ == root) {
            TORCH_CHECK(ins.size() == 1 && (int)ins[0].size() == size_,
                        "chorus: scatter: the root needs a list of ", size_, " input tensors");
            for (auto &t : ins[0]) check_same(outs[0], t, "scatter");
            in = ins[0];
        } else {
            TORCH_CHECK(ins.empty() || ins[0].empty(),
                        "chorus: scatter: only the root passes input tensors");
        }
        at::Tensor out = outs[0];
        return enqueue(OpType::SCATTER, outs, [this, out, in, root] {
            /* the root's blocks go to everyone, each rank keeps its own */
            at::Tensor flat = at::empty({size_, out.numel()}, out.options());
            for (size_t r = 0; r < in.size(); r++) flat[r].copy_(in[r].reshape({-1}));
            Buf b = buf_of(flat);
            CHECK_CHORUS(coll_, chorus_broadcast(coll_, flat.data_ptr(), b.count, b.dt, root),
                         "scatter");
            out.copy_(flat[rank_].view_as(out));
        });
    }

    WorkPtr reduce_scatter(Tensors &outs, std::vector<Tensors> &ins,
                           const c10d::ReduceScatterOptions &o) override
    {
        check_cpu(outs);
        TORCH_CHECK(outs.size() == 1 && ins.size() == 1 && (int)ins[0].size() == size_,
                    "chorus: reduce_scatter takes one output and a list of ", size_,
                    " inputs per rank");
        for (auto &t : ins[0]) check_same(outs[0], t, "reduce_scatter");
        Reduction red = reduction_of(o.reduceOp, outs[0], "reduce_scatter");
        at::Tensor out = outs[0];
        Tensors in = ins[0];
        return enqueue(OpType::REDUCE_SCATTER, outs, [this, out, in, red] {
            at::Tensor flat = at::empty({size_, out.numel()}, out.options());
            for (int r = 0; r < size_; r++) flat[r].copy_(in[r].reshape({-1}));
            scatter_reduce(premultiplied(flat, red), out, red.op);
        });
    }

    WorkPtr _reduce_scatter_base(at::Tensor &out, at::Tensor &in,
                                 const c10d::ReduceScatterOptions &o) override
    {
        check_scatter_sizes(out, in);
        Reduction red = reduction_of(o.reduceOp, out, "reduce_scatter_tensor");
        return enqueue(OpType::_REDUCE_SCATTER_BASE, {out}, [this, out, in, red] {
            scatter_reduce(premultiplied(in, red), out, red.op);
        });
    }

#if CHORUS_TORCH_COALESCED
    /* torch 2.x's all-gather and reduce-scatter of several tensors at once (FSDP2, DTensor,
     * functional collectives, _coalescing_manager): one collective per pair, in order. */
    WorkPtr allgather_into_tensor_coalesced(Tensors &outs, Tensors &ins,
                                            const c10d::AllgatherOptions &) override
    {
        TORCH_CHECK(outs.size() == ins.size(),
                    "chorus: all_gather_into_tensor_coalesced: ", outs.size(), " outputs for ",
                    ins.size(), " inputs");
        for (size_t i = 0; i < ins.size(); i++) check_gather_sizes(outs[i], ins[i]);
        return enqueue(OpType::COALESCED, outs, [this, outs, ins] {
            for (size_t i = 0; i < ins.size(); i++) {
                Dense o(outs[i]);
                gather_into(ins[i], o.ptr());
                o.put_back();
            }
        });
    }

    WorkPtr reduce_scatter_tensor_coalesced(Tensors &outs, Tensors &ins,
                                            const c10d::ReduceScatterOptions &o) override
    {
        TORCH_CHECK(outs.size() == ins.size(),
                    "chorus: reduce_scatter_tensor_coalesced: ", outs.size(), " outputs for ",
                    ins.size(), " inputs");
        std::vector<Reduction> rs;
        for (size_t i = 0; i < ins.size(); i++) {
            check_scatter_sizes(outs[i], ins[i]);
            rs.push_back(reduction_of(o.reduceOp, outs[i], "reduce_scatter_tensor_coalesced"));
        }
        return enqueue(OpType::COALESCED, outs, [this, outs, ins, rs] {
            for (size_t i = 0; i < ins.size(); i++)
                scatter_reduce(premultiplied(ins[i], rs[i]), outs[i], rs[i].op);
        });
    }
#endif

    WorkPtr alltoall_base(at::Tensor &out, at::Tensor &in, std::vector<int64_t> &out_splits,
                          std::vector<int64_t> &in_splits, const c10d::AllToAllOptions &) override
    {
        check_cpu(out);
        check_cpu(in);
        TORCH_CHECK(out.scalar_type() == in.scalar_type(),
                    "chorus: all_to_all_single: input and output dtypes differ");
        std::vector<int64_t> sc = counts_of(in, in_splits, "input");
        std::vector<int64_t> rc = counts_of(out, out_splits, "output");
        bool even = in_splits.empty() && out_splits.empty();
        return enqueue(OpType::ALLTOALL_BASE, {out}, [this, out, in, sc, rc, even] {
            Dense o(out), i(in);
            if (even) {
                Buf b = buf_of(in);
                CHECK_CHORUS(coll_, chorus_alltoall(coll_, i.ptr(), o.ptr(), b.count / size_, b.dt),
                             "all_to_all_single");
            } else {
                std::vector<char *> src(size_), dst(size_);
                char *s = (char *)i.ptr(), *d = (char *)o.ptr();
                for (int r = 0; r < size_; r++) {
                    src[r] = s;
                    dst[r] = d;
                    s += sc[r] * in.element_size();
                    d += rc[r] * out.element_size();
                }
                alltoallv(in, src, sc, dst, rc);
            }
            o.put_back();
        });
    }

    WorkPtr alltoall(Tensors &outs, Tensors &ins, const c10d::AllToAllOptions &) override
    {
        check_cpu(outs);
        check_cpu(ins);
        TORCH_CHECK((int)outs.size() == size_ && (int)ins.size() == size_,
                    "chorus: all_to_all takes lists of ", size_, " tensors");
        for (int r = 0; r < size_; r++)
            TORCH_CHECK(ins[r].scalar_type() == ins[0].scalar_type() &&
                            outs[r].scalar_type() == ins[0].scalar_type(),
                        "chorus: all_to_all: every tensor must have one dtype");
        Tensors o = outs, i = ins;
        return enqueue(OpType::ALLTOALL, outs, [this, o, i] {
            std::vector<Dense> od, id;
            std::vector<char *> src(size_), dst(size_);
            std::vector<int64_t> sc(size_), rc(size_);
            for (int r = 0; r < size_; r++) {
                od.emplace_back(o[r]);
                id.emplace_back(i[r]);
                src[r] = (char *)id[r].ptr();
                dst[r] = (char *)od[r].ptr();
                sc[r] = i[r].numel();
                rc[r] = o[r].numel();
            }
            alltoallv(i[0], src, sc, dst, rc);
            for (auto &d : od) d.put_back();
        });
    }

    WorkPtr barrier(const c10d::BarrierOptions &) override
    {
        return enqueue(OpType::BARRIER, {},
                       [this] { CHECK_CHORUS(coll_, chorus_barrier(coll_), "barrier"); });
    }

    WorkPtr send(Tensors &ts, int dst, int tag) override
    {
        check_cpu(ts);
        TORCH_CHECK(ts.size() == 1, "chorus: send takes one tensor");
        Dense d(ts[0]);
        Buf b = buf_of(ts[0]);
        chorus_request *req = nullptr;
        CHECK_CHORUS(p2p_, chorus_isend(p2p_, d.ptr(), b.count, b.dt, dst, tag, &req), "send");
        return c10::make_intrusive<P2PWork>(OpType::SEND, p2p_, req, std::move(d), b.count);
    }

    WorkPtr recv(Tensors &ts, int src, int tag) override
    {
        check_cpu(ts);
        TORCH_CHECK(ts.size() == 1, "chorus: recv takes one tensor");
        Dense d(ts[0]);
        Buf b = buf_of(ts[0]);
        chorus_request *req = nullptr;
        CHECK_CHORUS(p2p_, chorus_irecv(p2p_, d.ptr(), b.count, b.dt, src, tag, &req), "recv");
        return c10::make_intrusive<P2PWork>(OpType::RECV, p2p_, req, std::move(d), b.count);
    }

    WorkPtr recvAnysource(Tensors &ts, int tag) override
    {
        return recv(ts, CHORUS_ANY_SOURCE, tag);
    }

#if CHORUS_TORCH_SPLIT
    /* torch.distributed.split_group: ranks are this group's, in the new group's order; a rank
     * outside them joins nothing. The members tell this split apart from others of the same
     * ranks by the group name torch gives them all. */
    bool supportsSplitting() const override
    {
        return true;
    }

    c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override
    {
        return c10::make_intrusive<c10d::Backend::Options>("chorus");
    }

    c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store> &,
                                            const std::vector<int> &ranks,
                                            const c10::intrusive_ptr<Options> &opts) override
    {
        if (std::find(ranks.begin(), ranks.end(), rank_) == ranks.end()) return nullptr;
        std::string name = opts ? opts->group_name : std::string();
        uint64_t tag = 0xcbf29ce484222325ull; /* FNV-1a of the name */
        for (unsigned char ch : name) tag = (tag ^ ch) * 0x100000001b3ull;
        return subgroup(coll_, ranks, tag ^ SPLIT_TAG);
    }
#endif

  private:
    void check_gather_sizes(const at::Tensor &out, const at::Tensor &in)
    {
        check_cpu(out);
        check_cpu(in);
        TORCH_CHECK(out.scalar_type() == in.scalar_type() && out.numel() == in.numel() * size_,
                    "chorus: all_gather_into_tensor: the output must hold ", size_,
                    " times the input's elements of its dtype");
    }

    void check_scatter_sizes(const at::Tensor &out, const at::Tensor &in)
    {
        check_cpu(out);
        check_cpu(in);
        TORCH_CHECK(out.scalar_type() == in.scalar_type() && in.numel() == out.numel() * size_,
                    "chorus: reduce_scatter_tensor: the input must hold ", size_,
                    " times the output's elements of its dtype");
    }

    /* ---- the worker: collectives in the order they were called ---- */

    /* A work handle completes on the worker, which runs its future's callbacks there. A
     * callback that starts a collective of this group (DDP's PowerSGD hook does, then waits
     * for it) hands the queue to a new worker thread: the old one ends once the callback
     * returns, and the collectives keep their order. */
    WorkPtr enqueue(OpType type, Tensors outputs, std::function<void()> fn)
    {
        auto w = c10::make_intrusive<CollWork>(type, std::move(outputs));
        std::vector<c10::intrusive_ptr<CollWork>> finished; /* freed here, after the lock */
        {
            std::lock_guard<std::mutex> g(mu_);
            finished.swap(finished_);
            queue_.emplace_back(w, std::move(fn));
            if (std::this_thread::get_id() == active_) {
                retired_.push_back(std::move(worker_));
                worker_ = std::thread([this] { run(); });
                active_ = worker_.get_id();
            }
        }
        cv_.notify_all();
        return w;
    }

    void run()
    {
        for (;;) {
            std::pair<c10::intrusive_ptr<CollWork>, std::function<void()>> job;
            {
                std::unique_lock<std::mutex> g(mu_);
                auto me = std::this_thread::get_id();
                cv_.wait(g, [this, me] { return stop_ || !queue_.empty() || active_ != me; });
                if (active_ != me || queue_.empty()) return;
                job = std::move(queue_.front());
                queue_.pop_front();
            }
            std::exception_ptr e;
            try {
                job.second();
            } catch (...) {
                e = std::current_exception();
            }
            /* The worker lets go of its tensors before the caller can go on: a tensor with a
             * Python object takes the GIL when it is freed, and once the interpreter is
             * finalizing that ends this thread inside a noexcept destructor (std::terminate).
             * The call's tensors go while the caller still waits; the work handle (its outputs)
             * is kept and freed by the next call's thread or the group's destructor. */
            job.second = nullptr;
            job.first->done(e);
            std::lock_guard<std::mutex> g(mu_);
            finished_.push_back(std::move(job.first));
        }
    }

    void join_workers()
    {
        std::vector<std::thread> all;
        {
            std::lock_guard<std::mutex> g(mu_);
            all = std::move(retired_);
            all.push_back(std::move(worker_));
        }
        for (auto &t : all) t.join();
    }

    /* ---- the collectives the torch calls share ---- */

    void reduce_into(const at::Tensor &in, const at::Tensor &out, chorus_op op)
    {
        Dense i(in), o(out);
        Buf b = buf_of(in);
        CHECK_CHORUS(coll_, chorus_allreduce(coll_, i.ptr(), o.ptr(), b.count, b.dt, op),
                     "allreduce");
        o.put_back();
    }

    void gather_into(const at::Tensor &in, void *out)
    {
        Dense i(in);
        Buf b = buf_of(in);
        CHECK_CHORUS(coll_, chorus_allgather(coll_, i.ptr(), out, b.count, b.dt), "allgather");
    }

    /* every rank's in, one row each */
    at::Tensor gather_flat(const at::Tensor &in)
    {
        at::Tensor flat = at::empty({size_, in.numel()}, in.options());
        gather_into(in, flat.data_ptr());
        return flat;
    }

    void scatter_reduce(const at::Tensor &in, const at::Tensor &out, chorus_op op)
    {
        Dense i(in), o(out);
        Buf b = buf_of(out);
        CHECK_CHORUS(coll_, chorus_reduce_scatter(coll_, i.ptr(), o.ptr(), b.count, b.dt, op),
                     "reduce_scatter");
        o.put_back();
    }

    /* Elements to or from each rank: the split sizes count rows of dimension 0; no splits is
     * an even split. */
    std::vector<int64_t> counts_of(const at::Tensor &t, const std::vector<int64_t> &splits,
                                   const char *what)
    {
        int64_t rows = t.dim() ? t.size(0) : 1, row = rows ? t.numel() / rows : 0;
        std::vector<int64_t> c(size_);
        if (splits.empty()) {
            TORCH_CHECK(rows % size_ == 0, "chorus: all_to_all_single: the ", what,
                        "'s first dimension (", rows, ") does not divide by the group size ", size_,
                        "; pass split sizes");
            for (auto &x : c) x = rows / size_ * row;
            return c;
        }
        TORCH_CHECK((int)splits.size() == size_, "chorus: all_to_all_single: ", splits.size(), " ",
                    what, " split sizes for a group of ", size_);
        int64_t sum = 0;
        for (int r = 0; r < size_; r++) {
            TORCH_CHECK(splits[r] >= 0, "chorus: all_to_all_single: negative split size");
            sum += splits[r];
            c[r] = splits[r] * row;
        }
        TORCH_CHECK(sum == rows, "chorus: all_to_all_single: the ", what, " split sizes add up to ",
                    sum, ", its first dimension is ", rows);
        return c;
    }

    /* Uneven all-to-all: the ranks agree on the largest block, then one chorus_alltoall of
     * blocks padded to it. */
    void alltoallv(const at::Tensor &like, const std::vector<char *> &src,
                   const std::vector<int64_t> &sc, const std::vector<char *> &dst,
                   const std::vector<int64_t> &rc)
    {
        int64_t most = 0;
        for (int r = 0; r < size_; r++) most = std::max(most, std::max(sc[r], rc[r]));
        CHECK_CHORUS(coll_, chorus_allreduce(coll_, &most, &most, 1, CHORUS_INT64, CHORUS_MAX),
                     "all_to_all");
        size_t es = like.element_size();
        at::Tensor sbuf = at::empty({size_, most}, like.options());
        at::Tensor rbuf = at::empty({size_, most}, like.options());
        char *s = (char *)sbuf.data_ptr(), *d = (char *)rbuf.data_ptr();
        for (int r = 0; r < size_; r++) memcpy(s + r * most * es, src[r], sc[r] * es);
        Buf b = buf_of(sbuf[0]);
        CHECK_CHORUS(coll_, chorus_alltoall(coll_, s, d, b.count, b.dt), "all_to_all");
        for (int r = 0; r < size_; r++) memcpy(dst[r], d + r * most * es, rc[r] * es);
    }

    chorus_comm *coll_, *p2p_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::pair<c10::intrusive_ptr<CollWork>, std::function<void()>>> queue_;
    bool stop_ = false;
    std::thread worker_;
    std::thread::id active_;           /* the worker that runs the queue (under mu_) */
    std::vector<std::thread> retired_; /* workers that handed it on, ending or ended */
    std::vector<c10::intrusive_ptr<CollWork>> finished_; /* completed, not yet freed */
};

/* ---- making groups ------------------------------------------------------------------------ */

/* A group of ranks of c (in group order), made by its members only: a communicator for the
 * collectives and a point-to-point twin. */
static c10::intrusive_ptr<ChorusBackend> subgroup(chorus_comm *c, const std::vector<int> &ranks,
                                                  uint64_t tag)
{
    chorus_comm *coll = nullptr, *p2p = nullptr;
    CHECK_CHORUS(c, chorus_comm_create_group(c, (int)ranks.size(), ranks.data(), tag, &coll),
                 "new_group");
    chorus_result r =
        chorus_comm_create_group(c, (int)ranks.size(), ranks.data(), tag ^ P2P_TAG, &p2p);
    if (r != CHORUS_OK) {
        chorus_finalize(coll);
        fail(c, r, "new_group");
    }
    return c10::make_intrusive<ChorusBackend>(coll, p2p);
}

/* The world: chorus_init (the job from the environment that Python has set up), checked
 * against the rank and size torch.distributed was given. */
static c10::intrusive_ptr<ChorusBackend> make_world(int rank, int size)
{
    chorus_comm *world = nullptr, *p2p = nullptr;
    chorus_result r = chorus_init(&world);
    if (r != CHORUS_OK) fail(nullptr, r, "chorus_init");
    if (chorus_rank(world) != rank || chorus_size(world) != size) {
        int wr = chorus_rank(world), ws = chorus_size(world);
        chorus_finalize(world);
        TORCH_CHECK(false, "chorus: the job's environment says rank ", wr, " of ", ws,
                    ", init_process_group was given rank ", rank, " of ", size);
    }
    std::vector<int> all(size);
    for (int i = 0; i < size; i++) all[i] = i;
    r = chorus_comm_create_group(world, size, all.data(), P2P_TAG, &p2p);
    if (r != CHORUS_OK) {
        std::string msg = chorus_last_error(world);
        chorus_finalize(world);
        TORCH_CHECK(false, "chorus: chorus_comm_create_group failed: ", msg);
    }
    return c10::make_intrusive<ChorusBackend>(world, p2p);
}

/* A subgroup of world's ranks (global ranks, in group order), made by its members only. */
static c10::intrusive_ptr<ChorusBackend> make_group(const c10::intrusive_ptr<ChorusBackend> &world,
                                                    const std::vector<int> &ranks, uint64_t tag)
{
    return subgroup(world->comm(), ranks, tag);
}

} // namespace chorus_td

PYBIND11_MODULE(_chorus_torchdist, m)
{
    namespace py = pybind11;
    using chorus_td::ChorusBackend;
    m.doc() = "The torch.distributed backend \"chorus\" (use chorus.torch.distributed)";
    py::class_<ChorusBackend, chorus_td::BackendBase, c10::intrusive_ptr<ChorusBackend>>(
        m, "ProcessGroupChorus")
        .def_static("world", &chorus_td::make_world, py::arg("rank"), py::arg("size"),
                    py::call_guard<py::gil_scoped_release>())
        .def("new_group", &chorus_td::make_group, py::arg("ranks"), py::arg("tag"),
             py::call_guard<py::gil_scoped_release>());
}
