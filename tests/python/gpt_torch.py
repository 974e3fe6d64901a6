"""The GPT of nn/gpt.c against the same model written in PyTorch.

    python3 tests/python/gpt_torch.py BUILD/tests/unit/nn_gpt

Runs the C test program, which writes a small model's weights, one batch, the loss and every
gradient of one step; loads the weights into the torch model below (a GPT-2 block structure:
pre-norm LayerNorm, causal multi-head attention, tanh-GELU MLP, residuals, final LayerNorm,
output layer tied to the token embedding) and compares the loss and each gradient tensor.

Tolerance: torch computes in float64 from the same float32 weights, so the difference is the C
model's float32 rounding alone. float32 keeps 24 bits (relative 6e-8 per operation); sums of up
to a few hundred terms through a dozen chained kernels grow that to at most about 1e-6 of a
tensor's scale (5e-7 measured). Each gradient tensor must agree within 1e-5 of its largest
magnitude, ten times that, leaving room for other BLAS kernels' summation orders (a wrong
index, transposition, scale or missing term gives differences of the order of the values
themselves), and the loss within 1e-5 relative.
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


def main():
    prog = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([prog, d], check=True)
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

    bad = []
    rel = abs(c_loss - loss.item()) / abs(loss.item())
    print(f"loss: C {c_loss:.9f} torch {loss.item():.9f} (relative difference {rel:.2e})")
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
    print(f"gradients: {len(flat)} tensors, {off} values; largest difference {worst:.2e} of a "
          "tensor's largest gradient (tolerance 1e-5)")
    if bad:
        print("gpt_torch: differ: " + "; ".join(bad))
        sys.exit(1)
    print("gpt_torch: ok")


if __name__ == "__main__":
    main()
