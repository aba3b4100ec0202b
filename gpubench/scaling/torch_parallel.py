"""Data parallelism on PyTorch: DDP around the Keras model, a process per device (gloo between CPUs,
NCCL between GPUs), a step as in Keras's guide (Keras 3.15 has no data-parallel `fit` on torch)."""

from __future__ import annotations

import datetime
import os
from collections.abc import Sequence
from types import SimpleNamespace

from gpubench.backends import torch as _backend
from gpubench.scaling.rules import fields

STRATEGY = "ddp"
JIT_COMPILE = False  # eager, as the book's training on torch
INPUT_PIPELINE = "on_device"  # each process's share of the data sits on its device
PROCESSES = True  # a replica count runs as that many processes, in the chapter too
EVERY_WORKER_LISTENS = False  # worker 0 (MASTER_PORT) alone


def split_cpu(count: int | None) -> int:
    """How many CPU "devices" a sweep runs processes on: `count` (they share its cores), else 1."""
    return count or 1


def strategy(devices: Sequence[str]):
    """(a process group of this process alone, on the one device of `devices`, its fields)."""
    if len(devices) != 1:
        raise ValueError(f"devices {list(devices)}: PyTorch trains one device per process; "
                         "give one here, or let the sweep start a process per device")
    return join(["127.0.0.1:0"], 0, None, devices[0])  # port 0: the system picks a free one


def join(cluster: Sequence[str], index: int, replicas: int | None, device: str | None = None):
    """(process `index` of `cluster`'s group, its fields) on `device`, else a GPU, else the CPU."""
    torch, gpus = _backend.torch(), _backend.gpu_count()
    host = cluster[index].rpartition(":")[0]
    local = int(os.environ.get("LOCAL_RANK") or [a.rpartition(":")[0]
                                                 for a in cluster[:index]].count(host))
    if (replicas or 1) != 1 or (device is None and gpus and local >= gpus):
        raise ValueError(f"worker {index} is process {local + 1} on {host} with --replicas "
                         f"{replicas or 1}; PyTorch trains one device per process: list one "
                         f"worker per GPU ({gpus} here) in --cluster, --replicas 1")
    device = device or (f"gpu:{local}" if gpus else "cpu")
    where = torch.device(device.replace("gpu", "cuda") if device.startswith("gpu") else "cpu")
    if where.type == "cuda":
        torch.cuda.set_device(where)
    collective = "nccl" if where.type == "cuda" else "gloo"
    torch.distributed.init_process_group(  # worker 0 holds the TCPStore on its port
        collective, rank=index, init_method=f"tcp://{cluster[0]}", world_size=len(cluster),
        timeout=datetime.timedelta(seconds=300))
    found = SimpleNamespace(device=where, rank=index, world=len(cluster),
                            scope=lambda: _backend.scope(device))
    return found, fields(STRATEGY, "torch.distributed", collective, len(cluster),
                         f"DDP all-reduce ({collective})")


def all_reduce(found, values):
    """`values` from this process, summed over every process."""
    tensor = _backend.torch().tensor(values, device=found.device)
    _backend.torch().distributed.all_reduce(tensor)
    return tensor.cpu().numpy()


def leave(found) -> None:
    """Leave the process group (if not left yet)."""
    if _backend.torch().distributed.is_initialized():
        _backend.torch().distributed.destroy_process_group()


def make_epoch(found, model, x, y, batch: int, steps: int, *, seed: int = 0, shuffle: bool = True):
    """A function: an epoch of DDP steps, waited for, the summed loss of every process's steps."""
    torch, share = _backend.torch(), len(x) // found.world
    mine, batch = slice(found.rank * share, (found.rank + 1) * share), batch // found.world
    x = torch.as_tensor(x[mine], device=found.device)
    y = torch.as_tensor(y[mine].astype("int64"), device=found.device)
    generator = torch.Generator().manual_seed(seed) if shuffle else None
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[found.device] if found.device.type == "cuda" else None)
    weights = model.trainable_variables

    def step(rows):
        model.zero_grad(set_to_none=True)
        loss = model.loss(y[rows], ddp(x[rows], training=True))
        loss.backward()  # DDP averages every process's gradients
        with torch.no_grad():
            model.optimizer.apply([w.value.grad for w in weights], weights)
        return loss.detach()

    def epoch() -> float:
        order = torch.randperm(len(x), generator=generator) if generator else torch.arange(len(x))
        total = sum(step(rows) for rows in order.to(x.device).split(batch)[:steps])
        torch.distributed.all_reduce(total)
        _backend.sync()  # the GPUs' work (CPU work is done already)
        return float(total) / found.world

    return epoch
