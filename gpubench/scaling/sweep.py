"""The chapter's sweep over replica counts on one machine: the devices to replicate over and the
distribution over them; on PyTorch, worker processes."""

from __future__ import annotations

from collections.abc import Sequence

from gpubench import backends, results
from gpubench.params import check_scaling, positive_int
from gpubench.scaling import rules
from gpubench.scaling.cluster import in_processes
from gpubench.scaling.step import placed, record, telemetry_device, train


def split_cpu(count: int | None) -> None:
    """Split the CPU into `count` devices (PyTorch: processes; None: leave it), before anything."""
    if count is not None:
        rules.parallel().split_cpu(positive_int("virtual_devices", count))


def local_devices(names: Sequence[str] | None = None) -> list[str]:
    """The canonical devices to replicate over: `names`, else every GPU, else the CPU's."""
    from gpubench import devices  # noqa: PLC0415 - loads the backend, after split_cpu

    cpus = [f"cpu:{i}" for i in range(rules.parallel().cpu_count())]
    if names is None:
        return devices.list_devices()[1:] or cpus
    chosen = [rules.canonical(name) for name in names]
    for i, name in enumerate(chosen):
        if name.startswith("cpu") and name not in cpus:
            raise devices.DeviceError(
                f"unknown device {names[i]!r}: {backends.requested()} has {len(cpus)} CPU "
                f"device(s); use cpu:0 to {cpus[-1]}, or set virtual_devices to split the CPU")
        if not name.startswith("cpu"):
            chosen[i] = rules.canonical(devices.resolve(names[i]))
    if len(set(chosen)) != len(chosen):
        raise devices.DeviceError(f"devices {list(names)!r} name a device twice; give each once")
    return chosen


def strategy(device_names: Sequence[str]):
    """(the backend's distribution over `device_names` in this process, its record's fields)."""
    return rules.parallel().strategy([rules.canonical(d) for d in device_names])


def sweep(model_name: str, data, *, devices: Sequence[str] | None = None,
          replicas: Sequence[int] | None = None, per_replica_batch_size: int = 100,
          scaling: str = "weak", epochs: int = 3, virtual_devices: int | None = None,
          store: results.ResultsStore | None = None, env: str | None = None,
          notebook: str = rules.NOTEBOOK, seed: int = 0) -> list[dict]:
    """Train `model_name` on 1, 2, ... of `devices`; a record per count, stored as measured."""
    from gpubench import training  # noqa: PLC0415 - loads the backend

    params = check_scaling({"model": model_name, "devices": devices, "replicas": replicas,
                           "per_replica_batch_size": per_replica_batch_size, "scaling": scaling,
                           "epochs": epochs, "virtual_devices": virtual_devices})
    split_cpu(virtual_devices)
    par = rules.parallel()
    chosen = local_devices(params["devices"])
    counts = rules.check_replicas(params["replicas"], len(chosen))
    if virtual_devices is None and chosen[0].startswith("cpu") and par.cpu_count() > 1:
        virtual_devices = par.cpu_count()  # the CPU was split before the sweep (XLA_FLAGS)
    split = None if par.PROCESSES else training.split(model_name, data)
    records, base = [], None
    for count in counts:
        batch, per_replica = rules.global_batch(scaling, per_replica_batch_size, count)
        fields = dict(notebook=notebook, env=env or results.default_env_name(),
                      **placed(chosen[:count]), model=model_name, dataset=data.name,
                      data_source=data.source, data_verified=data.verified,
                      strategy=par.STRATEGY, replicas=count,
                      workers=count if par.PROCESSES else 1, global_batch_size=batch,
                      per_replica_batch_size=per_replica, scaling=scaling,
                      virtual_devices=virtual_devices)
        print(f"{count} replica(s) on {fields['device']}: global batch {batch} ({per_replica} "
              "per replica)", flush=True)
        try:
            if par.PROCESSES:
                records.append(in_processes(chosen[:count], data, params | {
                    "seed": seed, "fields": fields, "base": base}))
            else:
                found, facts = strategy(chosen[:count])
                print(f"  all-reduce: {facts['all_reduce']}", flush=True)
                measured = train(found, model_name, split, batch=batch, epochs=epochs, seed=seed,
                                 monitor=telemetry_device(chosen[:count]))
                records.append(record(measured, base, **(fields | facts)))
        except BaseException as exc:
            if store is not None:
                status, error = backends.failure(exc)
                store.append(results.make_record("scaling", status=status, error=error, **fields))
            raise
        base = base or (records[-1]["samples_per_second"] if count == 1 else None)
        if store is not None:
            store.append(records[-1])
    return records
