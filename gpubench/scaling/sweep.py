"""The chapter's sweep over replica counts on one machine, and the `scaling` record of a run:
its speed, its efficiency against the one-replica run, its telemetry."""

from __future__ import annotations

from collections.abc import Sequence

from gpubench import backends, results, telemetry, timing
from gpubench.params import check_scaling
from gpubench.scaling.placement import (
    canonical,
    check_replicas,
    local_devices,
    parallel,
    split_cpu,
    strategy,
    telemetry_device,
)
from gpubench.scaling.rules import NOTEBOOK, global_batch
from gpubench.scaling.step import Measured, train


def _placed(devices: Sequence[str]) -> dict:
    """A record's `device` ("cpu:0,cpu:1") and `devices` (["cpu:0", "cpu:1"]) fields."""
    names = [canonical(d) for d in devices]
    return {"device": ",".join(names), "devices": names}


def record(measured: Measured, one_replica_sps: float | None, **fields) -> dict:
    """The `scaling` record of one run (`fields`: where and how), with its efficiency against
    the one-replica run's `one_replica_sps`, and the telemetry of its epochs."""
    par = parallel()
    timed = timing.train_fields(measured.epoch_seconds, measured.train_samples,
                                measured.flops_per_sample)
    base = fields["replicas"] * one_replica_sps if one_replica_sps else None
    return results.make_record(
        "scaling", **fields, **timed, epochs=len(measured.epoch_seconds),
        batch_size=fields["global_batch_size"], train_samples=measured.train_samples,
        validation_samples=0,
        steady_epoch_min=min(timing.steady(measured.epoch_seconds), default=None),
        test_accuracy=measured.test_accuracy, test_loss=measured.test_loss,
        jit_compile=par.JIT_COMPILE, precision="float32", steps_per_execution=1,
        input_pipeline=par.INPUT_PIPELINE, flops_per_sample=measured.flops_per_sample,
        final_loss=measured.final_loss,
        scaling_efficiency=timed["samples_per_second"] / base if base else None,
        telemetry=telemetry.combine(measured.epoch_telemetry),
        **telemetry.epoch_fields(measured.epoch_telemetry),
    )


def sweep(model_name: str, data, *, devices: Sequence[str] | None = None,
          replicas: Sequence[int] | None = None, per_replica_batch_size: int = 100,
          scaling: str = "weak", epochs: int = 3, virtual_devices: int | None = None,
          store: results.ResultsStore | None = None, env: str | None = None,
          notebook: str = NOTEBOOK, seed: int = 0) -> list[dict]:
    """Train `model_name` data-parallel on 1, 2, ... of `devices`; one record per count.

    Efficiency compares each count with the one-replica run of this sweep (None
    when 1 is not among `replicas`). Records go to `store` as each run finishes.
    """
    from gpubench import training  # noqa: PLC0415 - loads the backend

    params = check_scaling({"model": model_name, "devices": devices, "replicas": replicas,
                           "per_replica_batch_size": per_replica_batch_size, "scaling": scaling,
                           "epochs": epochs, "virtual_devices": virtual_devices})
    split_cpu(virtual_devices)
    chosen = local_devices(params["devices"])
    counts = check_replicas(params["replicas"], len(chosen))
    cpus = parallel().cpu_count()
    if virtual_devices is None and chosen[0].startswith("cpu") and cpus > 1:
        virtual_devices = cpus  # the CPU was split before the sweep (XLA_FLAGS, split_cpu)
    split = training.split(model_name, data)
    env = env or results.default_env_name()
    kind = parallel().STRATEGY
    records, base = [], None
    for count in counts:
        batch, per_replica = global_batch(scaling, per_replica_batch_size, count)
        fields = dict(notebook=notebook, env=env, **_placed(chosen[:count]), model=model_name,
                      dataset=data.name, data_source=data.source, data_verified=data.verified,
                      strategy=kind,
                      replicas=count, workers=1, global_batch_size=batch,
                      per_replica_batch_size=per_replica, scaling=scaling,
                      virtual_devices=virtual_devices)
        try:
            found, fields["all_reduce"] = strategy(chosen[:count])
            print(f"{count} replica(s) on {', '.join(fields['devices'])}: global batch {batch} "
                  f"({per_replica} per replica), all-reduce {fields['all_reduce']}", flush=True)
            measured = train(found, model_name, split, batch=batch, epochs=epochs, seed=seed,
                             monitor=telemetry_device(chosen[:count]))
        except BaseException as exc:
            if store is not None:
                status, error = backends.failure(exc)
                store.append(results.make_record("scaling", status=status, error=error, **fields))
            raise
        records.append(record(measured, base, **fields))
        if count == 1:
            base = records[-1]["samples_per_second"]
            records[-1]["scaling_efficiency"] = 1.0
        if store is not None:
            store.append(records[-1])
    return records
