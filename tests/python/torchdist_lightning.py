"""Lightning's DDPStrategy on "chorus" ends with Gloo's parameters, bit for bit, at 2 ranks.

    PYTHONPATH=python python3 tests/python/torchdist_lightning.py

starts two 2-rank jobs of this file with the Python running it (ranks meeting through env://
variables, LOCAL_RANK set so that Lightning starts no processes of its own), one with
`DDPStrategy(process_group_backend="gloo")`, one with "chorus"; each trains the same small
model on the same data for a few steps and rank 0 writes its parameters; they must be equal.
Prints "torchdist lightning: ... identical to gloo". Without Lightning (`lightning` or
`pytorch_lightning`) it prints "torchdist lightning: skipped: ..." and exits 0.

    python3 tests/python/torchdist_lightning.py --rank-run BACKEND OUT.pt
"""
import os
import socket
import subprocess
import sys
import tempfile

import torch

try:
    import lightning.pytorch as pl
    from lightning.pytorch.strategies import DDPStrategy
except ImportError:
    try:
        import pytorch_lightning as pl
        from pytorch_lightning.strategies import DDPStrategy
    except ImportError as e:
        pl = None
        MISSING = str(e)

RANKS = 2


def make_module():
    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(1234)
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                           torch.nn.Linear(16, 1))

        def training_step(self, batch, _):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

    return Net()


def rank_run(backend, out):
    if backend == "chorus":
        import chorus.torch.distributed  # noqa: F401  registers "chorus"
    g = torch.Generator().manual_seed(7)
    data = torch.utils.data.TensorDataset(torch.randn(64, 8, generator=g),
                                          torch.randn(64, 1, generator=g))
    loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=False)
    model = make_module()
    trainer = pl.Trainer(accelerator="cpu", devices=RANKS, num_nodes=1, max_epochs=1,
                         strategy=DDPStrategy(process_group_backend=backend),
                         enable_progress_bar=False, enable_model_summary=False, logger=False,
                         enable_checkpointing=False, deterministic=True)
    trainer.fit(model, loader)
    if trainer.global_rank == 0:
        torch.save([p.detach().clone() for p in model.parameters()], out)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(backend, out):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(RANKS), NODE_RANK="0")
    env.pop("CHORUS_RANK", None)
    procs = []
    for r in range(RANKS):
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank-run",
                                       backend, out], env=dict(env, RANK=str(r),
                                                               LOCAL_RANK=str(r))))
    failed = None
    while failed is None and any(p.poll() is None for p in procs):
        for r, p in enumerate(procs):
            try:
                if p.wait(timeout=0.5) != 0:
                    failed = r
            except subprocess.TimeoutExpired:
                pass
    for p in procs:  # a rank that failed ends the other: never a hang on a dead peer
        if p.poll() is None:
            p.kill()
        p.wait()
    bad = [r for r, p in enumerate(procs) if p.returncode != 0]
    if bad:
        raise SystemExit("torchdist lightning: rank %d of the %s job exited with status %d"
                         % (bad[0], backend, procs[bad[0]].returncode))
    return torch.load(out)


def main():
    if pl is None:
        print("torchdist lightning: skipped: Lightning is not installed (%s)" % MISSING)
        return 0
    with tempfile.TemporaryDirectory(prefix="chorus-lightning-") as d:
        gloo = run_job("gloo", os.path.join(d, "gloo.pt"))
        chorus = run_job("chorus", os.path.join(d, "chorus.pt"))
    for i, (a, b) in enumerate(zip(gloo, chorus)):
        if not torch.equal(a, b):
            raise SystemExit("torchdist lightning: parameter %d differs from gloo's by up to %g"
                             % (i, (a - b).abs().max().item()))
    print("torchdist lightning %s on torch %s, %d ranks: %d parameters identical to gloo"
          % (pl.__version__, torch.__version__, RANKS, len(gloo)))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--rank-run":
        rank_run(sys.argv[2], sys.argv[3])
    else:
        sys.exit(main())
