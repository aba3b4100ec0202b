"""Data parallelism on PyTorch: DistributedDataParallel around the Keras model (a torch.nn.Module),
one device per process, started as `torchrun` does (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE;
gloo between CPUs, NCCL between GPUs), with a step of its own as in Keras's guide: Keras 3.15 has
no data-parallel `fit` on torch. A CPU's "virtual devices" are processes sharing its cores."""

from __future__ import annotations

import datetime
import os
from collections.abc import Sequence
from types import SimpleNamespace

from gpubench.backends import torch as _backend

STRATEGY = "ddp"
JIT_COMPILE = False  # eager, as the book's training on torch
INPUT_PIPELINE = "on_device"  # each process's share of the data sits on its device
PROCESSES = True  # a replica count runs as that many processes, in the chapter too
EVERY_WORKER_LISTENS = False  # worker 0 (MASTER_PORT) alone
_processes: int | None = None  # the CPU processes split_cpu asked for


def split_cpu(count: int) -> None:
    """Run `count` processes on the CPU, its "virtual devices" (they share its cores)."""
    global _processes
    _processes = count


def cpu_count() -> int:
    """How many CPU "devices" (processes) a sweep may use."""
    return _processes or 1


def strategy(devices: Sequence[str]):
    """(a process group of this process alone, on the one device of `devices`, its fields)."""
    from gpubench.scaling.cluster import free_ports  # noqa: PLC0415 - a cycle

    if len(devices) != 1:
        raise ValueError(f"devices {list(devices)}: PyTorch trains one device per process; "
                         "give one here, or let the sweep start a process per device")
    return join([f"127.0.0.1:{free_ports(1)[0]}"], 0, None, devices[0])


def join(cluster: Sequence[str], index: int, replicas: int | None, device: str | None = None):
    """(process `index`'s place in the process group of `cluster`, its fields), on `device`, else
    its local rank's GPU (LOCAL_RANK, else its place among its host's entries), else the CPU."""
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
    address, _, port = cluster[0].rpartition(":")
    os.environ.update(MASTER_ADDR=address.strip("[]"), MASTER_PORT=port, RANK=str(index),
                      WORLD_SIZE=str(len(cluster)))
    dist = torch.distributed
    dist.init_process_group("nccl" if where.type == "cuda" else "gloo",
                            timeout=datetime.timedelta(seconds=300))
    world, collective = dist.get_world_size(), dist.get_backend()
    return SimpleNamespace(device=where, rank=index, world=world,
                           scope=lambda: _backend.scope(device)), {
        "strategy": STRATEGY, "engine": "torch.distributed", "collective": collective,
        "replicas": world,
        "all_reduce": f"DDP all-reduce ({collective})" if world > 1 else "none (one replica)"}


def all_reduce(found, values):
    """`values` from this process, summed over every process."""
    tensor = _backend.torch().tensor(values, device=found.device)
    _backend.torch().distributed.all_reduce(tensor)
    return tensor.cpu().numpy()


def leave(found) -> None:
    """Leave the process group (if not left yet)."""
    if _backend.torch().distributed.is_initialized():
        _backend.torch().distributed.destroy_process_group()


def distributed_input(found, x, y, batch: int, *, seed: int = 0, shuffle: bool = True):
    """This process's share of `x`, `y`, put on its device once; its share of a global batch;
    the seeded generator of each epoch's order, or None not to shuffle."""
    torch, share = _backend.torch(), len(x) // found.world
    mine = slice(found.rank * share, (found.rank + 1) * share)
    return (torch.as_tensor(x[mine], device=found.device),
            torch.as_tensor(y[mine].astype("int64"), device=found.device), batch // found.world,
            torch.Generator().manual_seed(seed) if shuffle else None)


def make_step(found, model, batch: int):
    """The step: the model in DDP, its loss over this process's share of the batch, backward
    (DDP averages every process's gradients), then the Keras optimiser."""
    torch = _backend.torch()
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[found.device] if found.device.type == "cuda" else None)
    weights = model.trainable_variables

    def step(x, y):
        model.zero_grad(set_to_none=True)
        loss = model.loss(y, ddp(x, training=True))
        loss.backward()
        with torch.no_grad():
            model.optimizer.apply([w.value.grad for w in weights], weights)
        return loss.detach()

    return step


def run_epoch(step, data, steps: int) -> float:
    """One pass over this process's share; the summed loss of the steps, over every process."""
    torch, (x, y, batch, generator) = _backend.torch(), data
    order = torch.randperm(len(x), generator=generator) if generator else torch.arange(len(x))
    total = sum(step(x[i], y[i]) for i in order.to(x.device).split(batch)[:steps])
    torch.distributed.all_reduce(total)
    return float(total) / torch.distributed.get_world_size()


def sync(model) -> None:
    """Wait until the epoch's work is done on the GPUs (CPU work is done already)."""
    _backend.sync()
