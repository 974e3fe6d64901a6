"""The GPT of nn/gpt.c against the same model written in PyTorch.

    python3 tests/python/gpt_torch.py BUILD/tests/unit/nn_gpt [BUILD/bin/chorus-run]

Runs the C test program, which writes a small model's weights, one batch, the loss and every
gradient of one step; loads the weights into the torch model below (a GPT-2 block structure:
pre-norm LayerNorm, causal multi-head attention, tanh-GELU MLP, residuals, final LayerNorm,
output layer tied to the token embedding) and compares the loss and each gradient tensor.

With the launcher as a second argument it also runs the program on 2 ranks with the model split
by Megatron's tensor parallelism (each rank its heads of QKV and the attention output, its
half of the MLP's hidden units), puts the ranks' gradient shards back together into whole
tensors, and compares them with the same reference and tolerance; the gradients that every
rank holds whole (embeddings, LayerNorms, the row-parallel biases) must be equal on both
ranks, to the bit. Then it runs the program on 2 ranks as 2 pipeline stages (the embeddings
and block 0 on rank 0, block 1, the final LayerNorm and the tied output layer on rank 1; two
micro-batches; the residual stream and its gradient sent between the ranks), joins the
stages' gradients and compares them the same way; the two copies of the tied token
embedding's gradient must be equal, to the bit. Then it trains the unsplit model on 2 ranks
under ZeRO-1 and under ZeRO-2 (rank 0 the batch's first 2 sequences, rank 1 the third: the
reference's batch is the same 3), compares the ranks' summed loss and the summed gradient
(ZeRO-1: whole on both ranks, which must hold the same bits; ZeRO-2: each rank's chunks of it,
put back together by the segments' layout the program writes) with the same reference and
tolerance, and then the parameters after one AdamW step on each rank's chunks and the
all-gather (equal on both ranks, to the bit) against torch.optim.AdamW with the same
hyper-parameters, in float64, given the C model's summed gradient.

Tolerance: torch computes in float64 from the same float32 weights, so the difference is the C
model's float32 rounding alone. float32 keeps 24 bits (relative 6e-8 per operation); sums of up
to a few hundred terms through a dozen chained kernels grow that to at most about 1e-6 of a
tensor's scale (5e-7 measured). Each gradient tensor must agree within 1e-5 of its largest
magnitude, ten times that, leaving room for other BLAS kernels' summation orders (a wrong
index, transposition, scale or missing term gives differences of the order of the values
themselves), and the loss within 1e-5 relative.

The AdamW step is compared on the gradient the C model summed, not on torch's: its first step
moves each parameter by lr g / (|g| + eps), which for a gradient element within eps (1e-8) of
zero turns a rounding difference in g into one of the order of lr; the gradient itself is
compared above. What is left is float32 rounding of the update (a few operations on the moments,
relative 3e-7 of the step lr) and of the parameter (6e-8 of it per operation): each tensor must
agree within 1e-6 of its largest parameter magnitude, where a missing, misplaced or doubled
update (lr = 0.01) or weight decay (lr wd = 1e-3 of the parameter) shows a thousand times over.
"""
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, C, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(C)
        self.qkv = torch.nn.Linear(C, 3 * C)
        self.proj = torch.nn.Linear(C, C)
        self.ln2 = torch.nn.LayerNorm(C)
        self.fc = torch.nn.Linear(C, 4 * C)
        self.fc2 = torch.nn.Linear(4 * C, C)

    def attention(self, x):
        B, T, C = x.shape
        hs = C // self.heads
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, hs).transpose(1, 2) for t in (q, k, v))
        att = q @ k.transpose(-2, -1) / math.sqrt(hs)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.proj(y)

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self, layers, C, heads, context, vocab):
        super().__init__()
        self.wte = torch.nn.Parameter(torch.zeros(vocab, C))
        self.wpe = torch.nn.Parameter(torch.zeros(context, C))
        self.blocks = torch.nn.ModuleList(Block(C, heads) for _ in range(layers))
        self.lnf = torch.nn.LayerNorm(C)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.wte[tokens] + self.wpe[:T]
        for b in self.blocks:
            x = b(x)
        return self.lnf(x) @ self.wte.t()

    def flat(self):
        """The parameters in the C model's order (nn/gpt.c: embeddings, blocks, final norm)."""
        out = [self.wte, self.wpe]
        for b in self.blocks:
            out += [b.ln1.weight, b.ln1.bias, b.qkv.weight, b.qkv.bias, b.proj.weight,
                    b.proj.bias, b.ln2.weight, b.ln2.bias, b.fc.weight, b.fc.bias,
                    b.fc2.weight, b.fc2.bias]
        return out + [self.lnf.weight, self.lnf.bias]


def names(layers):
    out = ["wte", "wpe"]
    for l in range(layers):
        out += [f"block{l}.{n}" for n in ("ln1.weight", "ln1.bias", "qkv.weight", "qkv.bias",
                                          "proj.weight", "proj.bias", "ln2.weight", "ln2.bias",
                                          "fc.weight", "fc.bias", "fc2.weight", "fc2.bias")]
    return out + ["lnf.weight", "lnf.bias"]


def compare(title, c_loss, ref_loss, grads, flat, layers):
    """Prints the comparison of the C loss and gradients (one flat array in the C order) with
    torch's; returns the names that differ beyond the tolerance."""
    bad = []
    rel = abs(c_loss - ref_loss) / abs(ref_loss)
    print(f"{title}: loss: C {c_loss:.9f} torch {ref_loss:.9f} (relative difference {rel:.2e})")
    if rel > 1e-5:
        bad.append("loss")
    off, worst = 0, 0.0
    for name, p in zip(names(layers), flat):
        ref = p.grad.numpy().ravel()
        got = grads[off:off + ref.size].astype(np.float64)
        off += ref.size
        scale = np.abs(ref).max()
        err = np.abs(got - ref).max() / scale if scale > 0 else np.abs(got).max()
        worst = max(worst, err)
        if not scale > 0 or err > 1e-5:
            bad.append(f"{name} (max |C - torch| / max |torch| = {err:.2e}, scale {scale:.2e})")
    print(f"{title}: gradients: {len(flat)} tensors, {off} values; largest difference {worst:.2e} "
          "of a tensor's largest gradient (tolerance 1e-5)")
    return [f"{title}: {b}" for b in bad]


def split_local(g, layers, C, vocab, context, tp):
    """A rank's flat gradient shard as named arrays (nn/gpt.c's layout of a shard)."""
    Cl, Fl = C // tp, 4 * C // tp
    shapes = [("wte", (vocab, C)), ("wpe", (context, C))]
    for l in range(layers):
        shapes += [(f"block{l}.{n}", s) for n, s in (
            ("ln1.weight", (C,)), ("ln1.bias", (C,)), ("qkv.weight", (3 * Cl, C)),
            ("qkv.bias", (3 * Cl,)), ("proj.weight", (C, Cl)), ("proj.bias", (C,)),
            ("ln2.weight", (C,)), ("ln2.bias", (C,)), ("fc.weight", (Fl, C)), ("fc.bias", (Fl,)),
            ("fc2.weight", (C, Fl)), ("fc2.bias", (C,)))]
    shapes += [("lnf.weight", (C,)), ("lnf.bias", (C,))]
    out, off = {}, 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        out[name] = g[off:off + n].reshape(shape)
        off += n
    assert off == g.size, f"shard size {g.size}, layout {off}"
    return out


def join_shards(shards, layers, C):
    """The whole gradient (flat, C order) from the ranks' shards; the tensors every rank holds
    whole must be equal on every rank."""
    tp, Cl = len(shards), C // len(shards)
    out = []
    for name in names(layers):
        parts = [s[name] for s in shards]
        if name.endswith("qkv.weight") or name.endswith("qkv.bias"):
            whole = np.concatenate([p[j * Cl:(j + 1) * Cl] for j in range(3) for p in parts])
        elif name.endswith("proj.weight") or name.endswith("fc2.weight"):
            whole = np.concatenate(parts, axis=1)
        elif name.endswith("fc.weight") or name.endswith("fc.bias"):
            whole = np.concatenate(parts, axis=0)
        else:
            for r in range(1, tp):
                assert np.array_equal(parts[0], parts[r]), f"{name}: rank {r}'s whole gradient differs from rank 0's"
            whole = parts[0]
        out.append(whole.ravel())
    return np.concatenate(out)


def join_stages(stages, layers, C, vocab):
    """The whole gradient (flat, C order) from 2 pipeline stages' (nn/gpt.c's layout of a
    stage: stage 0 the embeddings and the first half of the blocks, stage 1 its copy of the
    token embedding, the other blocks and the final norm); both copies of the tied token
    embedding's gradient must be equal, to the bit."""
    n = vocab * C
    wte0, wte1 = stages[0][:n], stages[1][:n]
    assert np.array_equal(wte0, wte1), "the stages' copies of the token embedding's gradient differ"
    whole = np.concatenate([stages[0], stages[1][n:]])
    return whole


def join_zero_chunks(shards, layouts, n):
    """The whole summed gradient (flat, C order) from the ranks' ZeRO-2 chunks: each segment
    (off, len, chunk, shard_off) cut into chunks of `chunk` floats, rank r's the r-th, at
    shard_off in its shard (nn/zero.c)."""
    assert all(lay[:, :3].tolist() == layouts[0][:, :3].tolist() for lay in layouts), \
        "the ranks cut the segments differently"
    whole, seen = np.zeros(n, dtype=np.float32), np.zeros(n, dtype=bool)
    for r, (shard, lay) in enumerate(zip(shards, layouts)):
        for off, length, chunk, shard_off in lay:
            lo = off + r * chunk
            hi = min(lo + chunk, off + length)
            if hi > lo:
                whole[lo:hi] = shard[shard_off:shard_off + hi - lo]
                seen[lo:hi] = True
    assert seen.all(), f"{n - seen.sum()} gradient values in no rank's chunks"
    return whole


def compare_adamw(title, c_params, params, grads, hyper, shape):
    """The parameters after one AdamW step of the C model against torch.optim.AdamW from the
    same parameters and summed gradient; returns the names that differ."""
    lr, b1, b2, eps, wd = hyper
    layers = shape[0]
    model = GPT(*shape).double()
    flat = model.flat()
    off = 0
    with torch.no_grad():
        for p in flat:
            k = p.numel()
            p.copy_(torch.from_numpy(params[off:off + k].astype(np.float64)).view_as(p))
            p.grad = torch.from_numpy(grads[off:off + k].astype(np.float64)).view_as(p).clone()
            off += k
    torch.optim.AdamW(flat, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd).step()
    bad, off, worst = [], 0, 0.0
    for name, p in zip(names(layers), flat):
        ref = p.detach().numpy().ravel()
        got = c_params[off:off + ref.size].astype(np.float64)
        off += ref.size
        err = np.abs(got - ref).max() / np.abs(ref).max()
        worst = max(worst, err)
        if err > 1e-6:
            bad.append(f"{title}: AdamW step: {name} (max |C - torch| / max |torch| = {err:.2e})")
    print(f"{title}: parameters after one AdamW step (lr {lr:g}, betas {b1:g} {b2:g}, eps "
          f"{eps:g}, weight decay {wd:g}): largest difference {worst:.2e} of a tensor's largest "
          "parameter (tolerance 1e-6)")
    return bad


def read_zero(d, stage):
    """One ZeRO run's files: the ranks' parts of the loss, the summed gradient (stage 1: whole,
    the same bits on both ranks; stage 2: (the ranks' chunks, their layouts)) and the
    parameters after the step (the same bits on both ranks)."""
    def f32(name):
        return [np.fromfile(os.path.join(d, f"{name}.zero{stage}.{r}.f32"), dtype=np.float32)
                for r in range(2)]
    losses = [float(open(os.path.join(d, f"loss.zero{stage}.{r}.txt")).read()) for r in range(2)]
    grads, stepped = f32("grads"), f32("params")
    assert np.array_equal(stepped[0], stepped[1]), f"ZeRO-{stage}: the ranks' parameters differ after the step"
    if stage == 1:
        assert np.array_equal(grads[0], grads[1]), "ZeRO-1: the ranks' summed gradients differ"
        return losses, grads[0], stepped[0]
    layouts = [np.loadtxt(os.path.join(d, f"segs.zero2.{r}.txt"), dtype=np.int64, ndmin=2)
               for r in range(2)]
    return losses, (grads, layouts), stepped[0]


def main():
    prog = sys.argv[1]
    launcher = sys.argv[2] if len(sys.argv) > 2 else None
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([prog, d], check=True)
        if launcher:
            subprocess.run([launcher, "-np", "2", prog, "--tp", d], check=True)
            tp_grads = [np.fromfile(os.path.join(d, f"grads.{r}.f32"), dtype=np.float32) for r in range(2)]
            tp_loss = [float(open(os.path.join(d, f"loss.{r}.txt")).read()) for r in range(2)]
            subprocess.run([launcher, "-np", "2", prog, "--pipe", d], check=True)
            pipe_grads = [np.fromfile(os.path.join(d, f"grads.pipe.{r}.f32"), dtype=np.float32) for r in range(2)]
            pipe_loss = float(open(os.path.join(d, "loss.pipe.txt")).read())
            zero = {}
            for stage in (1, 2):
                subprocess.run([launcher, "-np", "2", prog, f"--zero{stage}", d], check=True)
                zero[stage] = read_zero(d, stage)
            hyper = [float(v) for v in open(os.path.join(d, "adamw.txt")).read().split()]
        layers, C, heads, context, vocab, B, T = map(int, open(os.path.join(d, "config.txt")).read().split())
        params = np.fromfile(os.path.join(d, "params.f32"), dtype=np.float32)
        grads = np.fromfile(os.path.join(d, "grads.f32"), dtype=np.float32)
        tokens = np.fromfile(os.path.join(d, "tokens.i32"), dtype=np.int32).reshape(B, T)
        targets = np.fromfile(os.path.join(d, "targets.i32"), dtype=np.int32).reshape(B, T)
        c_loss = float(open(os.path.join(d, "loss.txt")).read())

    model = GPT(layers, C, heads, context, vocab).double()
    flat = model.flat()
    total = sum(p.numel() for p in flat)
    assert total == params.size, f"parameter count: torch {total}, C {params.size}"
    off = 0
    with torch.no_grad():
        for p in flat:
            p.copy_(torch.from_numpy(params[off:off + p.numel()].astype(np.float64)).view_as(p))
            off += p.numel()
    logits = model(torch.from_numpy(tokens).long())
    loss = F.cross_entropy(logits.view(-1, vocab), torch.from_numpy(targets).long().view(-1))
    loss.backward()

    bad = compare("one rank", c_loss, loss.item(), grads, flat, layers)
    if launcher:
        shards = [split_local(g, layers, C, vocab, context, 2) for g in tp_grads]
        whole = join_shards(shards, layers, C)
        assert tp_loss[0] == tp_loss[1], f"the ranks' losses differ: {tp_loss}"
        bad += compare("tensor parallel 2", tp_loss[0], loss.item(), whole, flat, layers)
        bad += compare("pipeline 2", pipe_loss, loss.item(), join_stages(pipe_grads, layers, C, vocab),
                       flat, layers)
        for stage, (losses, g, stepped) in zero.items():
            if stage == 2:
                g = join_zero_chunks(g[0], g[1], params.size)
            title = f"ZeRO-{stage}, 2 ranks"
            bad += compare(title, sum(losses), loss.item(), g, flat, layers)
            bad += compare_adamw(title, stepped, params, g, hyper, (layers, C, heads, context, vocab))
    if bad:
        print("gpt_torch: differ: " + "; ".join(bad))
        sys.exit(1)
    print("gpt_torch: ok")


if __name__ == "__main__":
    main()
