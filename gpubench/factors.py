"""Speed factors: one-factor-at-a-time variations of a training run from the book's baseline.

The baseline is the book's setting: batch 100, float32, XLA off, one step per
execution, arrays fed to `fit`. Each variant changes one factor. On every device
all variants are trained in interleaved rounds (round r of every variant, then
round r+1), so that a machine that slows down for a while slows them all alike.
A round is one epoch, timed from its first step to its last (a `fit` call's
set-up is not counted); a variant whose warm-up probe projects an epoch far
slower than the baseline's (mixed_float16 on a CPU: ~200x) is time-boxed: each
of its rounds measures a bounded number of steps, and its accuracy is not measured.

Then the combination: each factor's value that was fastest in the rounds (the
baseline's where none beat it), trained in a second set of rounds interleaved
with a fresh baseline, against which it is compared.

Statistic: the fastest steady round (rounds 2..n) per sample, the same for
baseline and variant, with the median beside it. Uncertainty: the range of the
per-round ratios variant/baseline (rounds are paired by interleaving); a
factor whose range includes 1.0 has "no clear effect".

Backends: the factors are those the backend has. JAX always compiles, so XLA is no factor
there: the xla values collapse into one compiled baseline ("XLA: always on with JAX").
`tf.data` runs wherever TensorFlow can be imported (Keras's JAX `fit` takes a
tf.data.Dataset too); where it cannot, the chapter's default list drops it with a note and
an explicit request is refused, naming the fix. The feeds themselves (tf.data, and the
training set kept on the device with `steps_per_execution` steps per compiled call) live in
`backends.part("feeds")`; nothing here imports TensorFlow or JAX.

The functions the report uses (`effects`, `verdict`, `crossover_batch_size`,
`percent_of_matmul_peak`, `round_rates`) load no ML framework.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from gpubench import backends
from gpubench.params import DEFAULTS, SPEED_FACTORS_MODELS, positive_int

MODELS = SPEED_FACTORS_MODELS
FACTORS = ("batch_size", "precision", "xla", "steps_per_execution", "input_pipeline")
FACTOR_NAMES = ("baseline", *FACTORS, "combined")
# Notebook parameter -> the factor whose values it lists.
LIST_PARAMS = {"batch_sizes": "batch_size", "precisions": "precision", "xla_modes": "xla",
               "steps_per_execution": "steps_per_execution", "input_pipelines": "input_pipeline"}
# A variant whose probe projects an epoch more than BOX_FACTOR x the baseline's is time-boxed.
BOX_FACTOR = 8.0
# Probes grow until one lasts PROBE_SECONDS (or covers an epoch).
PROBE_SECONDS = 0.3
# A dtype policy's compute dtype: the matmul dtype its speed is compared with.
COMPUTE_DTYPE = {"float32": "float32", "mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}
# Backends that always compile: XLA is no factor there.
ALWAYS_COMPILED = ("jax",)
XLA_NOTE = ("XLA: always on with JAX (JAX compiles every training step), so it is not a factor "
            "here: xla_modes {modes} run as one compiled baseline, and no XLA variant.")
NO_TF_DATA = ("input pipeline 'tf.data' needs TensorFlow, which cannot be imported in this "
              "{backend} env")
TF_DATA_FIX = ("drop it (e.g. -p input_pipelines=arrays,on_device) or `pip install tensorflow-cpu` "
               "into this env")


@dataclass(frozen=True)
class Variant:
    """One training set-up: the factor it varies and the value of every factor."""

    factor: str
    batch_size: int = 100
    precision: str = "float32"
    xla: str = "off"
    steps_per_execution: int = 1
    input_pipeline: str = "arrays"

    @property
    def label(self) -> str:
        """A short name for tables and charts: "batch 1024", "XLA on", "combined (...)"."""
        return _label(self.factor, self.settings())

    def settings(self) -> dict:
        """The five factor values."""
        return {name: getattr(self, name) for name in FACTORS}


BASELINE = Variant("baseline")


def _label(factor: str, settings: dict) -> str:
    parts = {
        "batch_size": f"batch {settings['batch_size']}",
        "precision": str(settings["precision"]),
        "xla": f"XLA {settings['xla']}",
        "steps_per_execution": f"steps/exec {settings['steps_per_execution']}",
        "input_pipeline": str(settings["input_pipeline"]),
    }
    if factor == "baseline":
        return "baseline (book)"
    if factor == "combined":
        changed = [parts[name] for name in FACTORS if settings[name] != getattr(BASELINE, name)]
        return "combined (" + (", ".join(changed) or "= baseline") + ")"
    return parts[factor]


def variants(values: dict[str, Sequence]) -> list[Variant]:
    """The baseline and one variant per factor value that differs from the baseline's."""
    found = [BASELINE]
    for factor in FACTORS:
        for value in values.get(factor, ()):
            if value != getattr(BASELINE, factor):
                found.append(replace(BASELINE, factor=factor, **{factor: value}))
    return found


# --- parameters (no TensorFlow) ------------------------------------------------------------


def factor_values(params: dict) -> dict[str, list]:
    """The values of each factor, from checked notebook parameters."""
    return {factor: list(params[name]) for name, factor in LIST_PARAMS.items()}


def for_backend(values: dict[str, Sequence], backend: str, tf_data: bool, *,
                drop_tf_data: bool = False) -> tuple[dict[str, list], list[str]]:
    """The factor values `backend` can run, and notes on what it changed.

    On a backend that always compiles (JAX) the xla values collapse into the one compiled
    baseline. Where `tf_data` is False (TensorFlow not importable), "tf.data" is dropped with
    a note when `drop_tf_data` (the chapter's default list), else refused: ValueError naming
    the value and the fix.
    """
    checked = {factor: list(found) for factor, found in values.items()}
    notes = []
    if backend in ALWAYS_COMPILED and checked.get("xla"):
        notes.append(XLA_NOTE.format(modes=checked["xla"]))
        checked["xla"] = []
    pipelines = checked.get("input_pipeline") or []
    if "tf.data" in pipelines and not tf_data:
        why = NO_TF_DATA.format(backend=backend)
        if not drop_tf_data:
            raise ValueError(f"input_pipelines {pipelines}: {why}; {TF_DATA_FIX}")
        checked["input_pipeline"] = [p for p in pipelines if p != "tf.data"]
        notes.append(f"tf.data: not measured: {why} (`pip install tensorflow-cpu` into this "
                     "env to add it).")
    return checked, notes


def chapter_values(params: dict) -> tuple[dict[str, list], list[str]]:
    """The chapter's factor values on the backend Keras runs here, and notes on what it changed;
    the default input_pipelines list drops tf.data where TensorFlow is absent, a list given
    by hand that asks for it is refused."""
    default = DEFAULTS["full"]["Speed_Factors"]["input_pipelines"]
    return for_backend(factor_values(params), backends.current().NAME,
                       backends.part("feeds").tf_data_available(),
                       drop_tf_data=list(params["input_pipelines"]) == list(default))


# --- the numbers the chapter and the report read (no TensorFlow) ---------------------------


def steady_rates(seconds: Sequence[float], samples: float) -> list[float]:
    """Samples per second of each steady round (rounds 2..n), `samples` per round."""
    return [samples / s for s in seconds[1:] if s and s > 0]


def round_rates(record: dict) -> list[float]:
    """Samples per second of each steady round (rounds 2..n) of a Speed_Factors record."""
    seconds = record.get("epoch_seconds") or []
    if len(seconds) < 2:
        return []
    if record.get("time_boxed"):
        return steady_rates(seconds, record["steps_measured"] / (len(seconds) - 1)
                            * record["batch_size"])
    return steady_rates(seconds, record["train_samples"])


def verdict(low: float, high: float) -> str:
    """"faster" / "slower", or "no clear effect" when the interval [low, high] includes 1.0."""
    if low <= 1.0 <= high:
        return "no clear effect"
    return "faster" if low > 1.0 else "slower"


def compare(baseline_rates: Sequence[float], rates: Sequence[float]) -> dict:
    """Speedup (best rate over best rate), its median twin, and the paired rounds' interval."""
    if not baseline_rates or not rates:
        return {"speedup": None, "median_speedup": None, "low": None, "high": None,
                "verdict": "not measured"}
    pairs = [r / b for b, r in zip(baseline_rates, rates, strict=False)]  # rounds so far
    speedup = max(rates) / max(baseline_rates)
    low, high = min(pairs + [speedup]), max(pairs + [speedup])
    return {"speedup": speedup,
            "median_speedup": statistics.median(rates) / statistics.median(baseline_rates),
            "low": low, "high": high, "verdict": verdict(low, high)}


def _is_factor_record(record: dict) -> bool:
    return record.get("benchmark") == "train" and record.get("factor") in FACTOR_NAMES


def _xla(record: dict) -> str:
    """The xla factor's value of a record: what ran, and the baseline's on a backend that
    always compiles (there it is no factor)."""
    if record.get("backend") in ALWAYS_COMPILED:
        return BASELINE.xla
    return "on" if record.get("jit_compile") else "off"


def effects(records: Sequence[dict]) -> list[dict]:
    """Each Speed_Factors record against the baseline of its env and device, in record order."""
    rows = []
    factor_records = [r for r in records if _is_factor_record(r)]
    baselines = {(r["env"], r["device"]): r for r in factor_records
                 if r["factor"] == "baseline" and r["status"] == "ok"}
    for record in factor_records:
        base = baselines.get((record["env"], record["device"]))
        ok = record["status"] == "ok" and base is not None
        if ok and record.get("paired_baseline_seconds"):  # the combination's own baseline rounds
            base_rates = steady_rates(record["paired_baseline_seconds"], base["train_samples"])
        else:
            base_rates = round_rates(base) if ok else []
        row = compare(base_rates, round_rates(record)) if ok else compare([], [])
        label = _label(record["factor"], {k: record.get(k) if k != "xla" else _xla(record)
                                          for k in FACTORS})
        rows.append({
            "env": record["env"], "device": record["device"], "factor": record["factor"],
            "label": label, "value": label, **row,
            "clear": row["verdict"] in ("faster", "slower"), "status": record["status"],
            "time_boxed": bool(record.get("time_boxed")),
            "steps_measured": record.get("steps_measured"),
            "samples_per_second": record.get("samples_per_second"),
            "test_accuracy": record.get("test_accuracy"),
            "achieved_gflops": record.get("achieved_gflops"), "record": record,
        })
    return rows


def describe(effect: dict) -> str:
    """An effect in words: "1.90x faster", "196x slower", "no clear effect", "not measured"."""
    speedup = effect.get("speedup")
    if speedup is None or effect.get("verdict") == "not measured":
        return "not measured"
    if effect["verdict"] == "no clear effect":
        return "no clear effect"
    if speedup >= 1:
        return f"{speedup:.2f}x faster"
    slower = 1 / speedup
    return f"{slower:.0f}x slower" if slower >= 10 else f"{slower:.2f}x slower"


def crossover_batch_size(records: Sequence[dict]) -> int | None:
    """The smallest batch size at which a GPU trains faster than the CPU of the same env, or None.

    Uses the baseline and the batch-size variants (the other factors at the book's values).
    """
    rates: dict[tuple[str, str], dict[int, float]] = {}
    for record in records:
        if (_is_factor_record(record) and record["status"] == "ok"
                and record["factor"] in ("baseline", "batch_size")
                and record.get("samples_per_second")):
            per = rates.setdefault((record["env"], record["device"]), {})
            per[record["batch_size"]] = record["samples_per_second"]
    found = []
    for (env, device), gpu in rates.items():
        cpu = rates.get((env, "cpu"))
        if device == "cpu" or not cpu:
            continue
        wins = [size for size in sorted(set(gpu) & set(cpu)) if gpu[size] > cpu[size]]
        if wins:
            found.append(wins[0])
    return min(found) if found else None


def best_matmul_gflops(matmul_records: Sequence[dict], env: str, device: str,
                       dtype: str) -> float | None:
    """The best GFLOP/s (fastest repeat) among ok matmul records of that env, device and dtype."""
    values = [2 * r["size"] ** 3 / (r.get("seconds_min") or r["seconds"]) / 1e9
              for r in matmul_records
              if r.get("benchmark") == "matmul" and r.get("status") == "ok" and r.get("seconds")
              and r["env"] == env and r["device"] == device and r["dtype"] == dtype]
    return max(values) if values else None


def percent_of_matmul_peak(record: dict, matmul_records: Sequence[dict]) -> float | None:
    """A train record's achieved GFLOP/s as % of the best matmul GFLOP/s at its compute dtype."""
    dtype = COMPUTE_DTYPE.get(record.get("precision") or "float32")
    best = best_matmul_gflops(matmul_records, record["env"], record["device"], dtype or "")
    if not best or not record.get("achieved_gflops"):
        return None
    return 100.0 * record["achieved_gflops"] / best


def _fmt_x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def accuracy_text(row: dict) -> str:
    """Test accuracy, or why there is none."""
    if row["time_boxed"]:
        return "accuracy not measured (time-boxed)"
    if row["test_accuracy"] is None:
        return "n/a"
    return f"{row['test_accuracy']:.4f}"


def _effect_text(row: dict) -> str:
    if row["status"] != "ok":
        return f"{row['status']}: {row['record'].get('error') or ''}"
    return "(the reference)" if row["factor"] == "baseline" else describe(row)


def table(rows: Sequence[dict], matmul_records: Sequence[dict] = ()) -> str:
    """A Markdown table, a line per variant and device: x vs baseline, effect, GPU busy %,
    accuracy."""
    lines = ["| device | variant | x vs baseline (min) | median x | interval | effect | "
             "images/s | steps | GFLOP/s | % of matmul | GPU busy | test accuracy |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        interval = ("n/a" if row["low"] is None else f"{row['low']:.2f}–{row['high']:.2f}")
        pct = percent_of_matmul_peak(row["record"], matmul_records)
        rate = row["samples_per_second"]
        gflops = row["achieved_gflops"]
        steps = row["steps_measured"]
        lines.append(
            f"| {row['device']} | {row['label']} | {_fmt_x(row['speedup'])} | "
            f"{_fmt_x(row['median_speedup'])} | {interval} | "
            f"{_effect_text(row)} | "
            f"{'n/a' if rate is None else f'{rate:,.0f}'} | "
            f"{'n/a' if steps is None else steps}{' (time-boxed)' if row['time_boxed'] else ''} | "
            f"{'n/a' if gflops is None else f'{gflops:.1f}'} | "
            f"{'n/a' if pct is None else f'{pct:.0f}%'} | {_busy_text(row['record'])} | "
            f"{accuracy_text(row)} |")
    return "\n".join(lines)


def _busy_text(record: dict) -> str:
    """The GPU's busy % over a variant's rounds (NVML), "n/a" on a CPU or without NVML."""
    busy = (record.get("telemetry") or {}).get("gpu_util_percent_mean")
    return "n/a" if busy is None else f"{busy:.0f} %"


def findings(rows: Sequence[dict]) -> str:
    """A few sentences, from the measured rows, saying which factors matter on each device."""
    out = []
    for device in dict.fromkeys(row["device"] for row in rows):
        mine = [r for r in rows if r["device"] == device and r["factor"] != "baseline"
                and r["speedup"] is not None]
        if not mine:
            out.append(f"- **{device}**: nothing measured against a baseline.")
            continue
        faster = sorted((r for r in mine if r["verdict"] == "faster" and r["factor"] != "combined"),
                        key=lambda r: -r["speedup"])
        slower = sorted((r for r in mine if r["verdict"] == "slower"), key=lambda r: r["speedup"])
        neutral = [r["label"] for r in mine if r["verdict"] == "no clear effect"]
        parts = []
        if faster:
            parts.append("faster: " + ", ".join(f"{r['label']} {r['speedup']:.2f}x"
                                                for r in faster))
        if slower:
            parts.append("slower: " + ", ".join(
                f"{r['label']} {1 / r['speedup']:.0f}x slower" if r["speedup"] < 0.2
                else f"{r['label']} {r['speedup']:.2f}x" for r in slower))
        if neutral:
            parts.append("no clear effect: " + ", ".join(neutral))
        combined = [r for r in mine if r["factor"] == "combined"]
        text = f"- **{device}**: " + "; ".join(parts) + "."
        if faster:
            text += f" The factor that matters most here is **{faster[0]['label']}**."
        if combined:
            c = combined[0]
            text += (f" Together, {c['label']} runs at {c['speedup']:.2f}x the book's setting "
                     f"({c['verdict']}).")
            if faster and c["speedup"] < faster[0]["speedup"]:
                text += (f" That is less than {faster[0]['label']} alone: these factors do not "
                         "add up here.")
        out.append(text)
    compiled = sorted({r["record"].get("backend") for r in rows} & set(ALWAYS_COMPILED))
    if compiled:
        out.append("- **XLA**: always on with " + ", ".join(n.upper() for n in compiled)
                   + ": every row ran compiled, so XLA is not a factor here.")
    return "\n".join(out)


def crossover_text(records: Sequence[dict]) -> str:
    """One sentence on the CPU-GPU crossover batch size, or why there is none."""
    devices = {r["device"] for r in records if _is_factor_record(r)}
    if not any(d != "cpu" for d in devices):
        backend = next((r.get("backend") for r in records if _is_factor_record(r)),
                       "tensorflow") or "tensorflow"
        kernel = f"gpubench-{backends.LABEL_PREFIX.get(backend, '')}gpu"
        return ("No GPU in this environment: no CPU-GPU crossover batch size. Run this notebook "
                f"in the {kernel} kernel to get it.")
    if "cpu" not in devices:
        return "The CPU was not measured here (devices), so there is no crossover to show."
    size = crossover_batch_size(records)
    if size is None:
        return "The GPU beat the CPU at none of the batch sizes measured."
    return f"CPU-GPU crossover: the GPU trains faster than the CPU from batch size **{size}** on."


# --- measuring (Keras from here on, through gpubench.backends, imported inside the functions)


@dataclass
class _Trainer:
    """One variant on one device: its model, its feed, and the rounds measured so far."""

    variant: Variant
    device: str
    model: object
    x: object
    y: object
    dataset: object = None
    on_device: object = None
    steps_per_epoch: int = 0
    probe_step_seconds: float = math.inf
    boxed_steps: int | None = None
    round_seconds: list = None
    round_telemetry: list = field(default_factory=list)
    steps_done: int = 0
    status: str = "ok"
    error: str | None = None
    paired_baseline_seconds: list | None = None
    test_loss: float | None = None
    test_accuracy: float | None = None

    def fail(self, exc: BaseException) -> None:
        """Mark this variant failed ("oom" or "error"); the other variants go on."""
        self.status, self.error = backends.failure(exc)

    def timed(self, steps: int | None, *, monitor: bool = False) -> float:
        """Seconds to train `steps` steps (None: one epoch), ended with a sync on the model's
        variables; with `monitor`, the round's telemetry is kept in `round_telemetry`.

        With `fit`, an epoch clock times the steps themselves, as in a long training
        run, not the set-up that each short `fit` call adds.
        """
        from gpubench import telemetry, timing  # noqa: PLC0415

        v = self.variant
        if v.input_pipeline == "on_device":
            watch = telemetry.Monitor(self.device).start() if monitor else None
            start = time.perf_counter()
            self.on_device(steps)
            timing.sync(list(self.model.variables))
            seconds = time.perf_counter() - start
            if watch is not None:
                self.round_telemetry.append(watch.stop())
            return seconds
        clock = timing.epoch_timer(self.device if monitor else None)
        if v.input_pipeline == "tf.data":
            feed = self.dataset if steps is None else self.dataset.take(steps)
            self.model.fit(feed, epochs=1, verbose=0, shuffle=False,  # the dataset shuffles
                           callbacks=[clock])
        else:
            n = len(self.x) if steps is None else min(len(self.x), steps * v.batch_size)
            self.model.fit(self.x[:n], self.y[:n], batch_size=v.batch_size, epochs=1, verbose=0,
                           callbacks=[clock])
        if monitor:
            self.round_telemetry += clock.epoch_telemetry
        return clock.epoch_seconds[0]

    def evaluate(self, split) -> None:
        """Test loss and accuracy after the rounds (not for a failed or time-boxed variant)."""
        from gpubench import devices  # noqa: PLC0415

        if self.status != "ok" or self.boxed_steps is not None or len(self.round_seconds) < 2:
            return
        with devices.scope(self.device):
            loss, accuracy = self.model.evaluate(split.x_test, split.y_test, verbose=0,
                                                 batch_size=max(self.variant.batch_size, 256))
        self.test_loss, self.test_accuracy = float(loss), float(accuracy)

    def rates(self) -> list[float]:
        """Samples per second of each steady round so far."""
        per_round = (self.boxed_steps * self.variant.batch_size if self.boxed_steps
                     else len(self.x))
        return steady_rates(self.round_seconds, per_round)


def _make_trainer(variant: Variant, model_name: str, device: str, split, learning_rate) -> _Trainer:
    """Build and compile the variant's model and its feed on `device`."""
    from gpubench import devices, training  # noqa: PLC0415 - loads Keras

    feeds = backends.part("feeds")
    with devices.scope(device):
        model = training.build_model(model_name, device, precision=variant.precision,
                                     learning_rate=learning_rate, xla=variant.xla,
                                     steps_per_execution=variant.steps_per_execution)
        trainer = _Trainer(variant, device, model, split.x_train, split.y_train, round_seconds=[])
        trainer.steps_per_epoch = math.ceil(len(split.x_train) / variant.batch_size)
        if variant.input_pipeline == "tf.data":
            if not feeds.tf_data_available():
                raise ValueError(f"{NO_TF_DATA.format(backend=backends.current().NAME)}; "
                                 f"{TF_DATA_FIX}")
            trainer.dataset = feeds.make_dataset(split.x_train, split.y_train,
                                                 variant.batch_size)
        elif variant.input_pipeline == "on_device":
            # One fit step builds the optimizer and the metrics before the compiled loop runs.
            n = min(len(split.x_train), variant.batch_size)
            model.fit(split.x_train[:n], split.y_train[:n], batch_size=n, epochs=1, verbose=0)
            trainer.on_device = feeds.on_device_feed(
                model, split.x_train, split.y_train, variant.batch_size,
                variant.steps_per_execution, bool(getattr(model, "jit_compile", False)), device)
    return trainer


def _probe(trainer: _Trainer) -> None:
    """Compile, then time growing step counts until one lasts PROBE_SECONDS (or covers an epoch).

    The cost of a step is the difference between the last two probes over their
    difference in steps, so that the fixed cost of an epoch does not count; a
    second probe of the same trainer keeps the lower cost of the two.
    """
    from gpubench import devices  # noqa: PLC0415

    spe = trainer.variant.steps_per_execution
    with devices.scope(trainer.device):
        trainer.timed(spe)  # tracing and compilation
        steps, seconds = spe, trainer.timed(spe)
        previous = None
        while seconds < PROBE_SECONDS and steps < trainer.steps_per_epoch:
            previous = (steps, seconds)
            steps = min(trainer.steps_per_epoch, steps * 4)
            seconds = trainer.timed(steps)
    per_step = seconds / steps
    if previous is not None and seconds > previous[1]:
        per_step = (seconds - previous[1]) / (steps - previous[0])
    trainer.probe_step_seconds = min(trainer.probe_step_seconds, per_step)


def _projected_epoch(trainer: _Trainer) -> float:
    return trainer.probe_step_seconds * trainer.steps_per_epoch


def _decide_box(trainer: _Trainer, baseline_epoch: float) -> None:
    """Time-box a variant whose probe projects an epoch BOX_FACTOR x the baseline's or more,
    twice: one probe slowed by a busy machine does not box a variant."""
    if _projected_epoch(trainer) <= BOX_FACTOR * baseline_epoch:
        return
    _probe(trainer)
    if _projected_epoch(trainer) <= BOX_FACTOR * baseline_epoch:
        return
    spe = trainer.variant.steps_per_execution
    steps = int(baseline_epoch / trainer.probe_step_seconds) // spe * spe
    trainer.boxed_steps = max(spe, min(steps, trainer.steps_per_epoch - 1))


def best_settings(trainers: Sequence[_Trainer]) -> dict:
    """Each factor's value with the best speedup in the rounds (the chapter's statistic), where
    one beats the baseline; time-boxed and failed variants never count. A value whose effect
    is not clear may be chosen: the combination's own rounds then show what it is worth."""
    settings = BASELINE.settings()
    base = trainers[0].rates()
    for factor in FACTORS:
        best = 1.0
        for t in trainers:
            if t.variant.factor != factor or t.status != "ok" or t.boxed_steps is not None:
                continue
            speedup = compare(base, t.rates())["speedup"]
            if speedup is not None and speedup > best:
                best, settings[factor] = speedup, getattr(t.variant, factor)
    return settings


def _probe_rate(trainer: _Trainer) -> float:
    return trainer.variant.batch_size / trainer.probe_step_seconds


def _prepared(variant: Variant, model_name: str, device: str, split, learning_rate) -> _Trainer:
    """A built and probed trainer, or a failed one that says why (an OOM at batch 4096, say)."""
    try:
        trainer = _make_trainer(variant, model_name, device, split, learning_rate)
        _probe(trainer)
    except Exception as exc:  # noqa: BLE001 - recorded as the variant's status
        trainer = _Trainer(variant, device, None, None, None, round_seconds=[])
        trainer.fail(exc)
    return trainer


def _prepare_all(variants_: Sequence[Variant], model_name: str, device: str, split,
                 learning_rate, say: Callable[[str], None]) -> list[_Trainer]:
    """Build and probe each variant, saying what each probe found."""
    trainers = []
    for variant in variants_:
        start = time.perf_counter()
        trainers.append(_prepared(variant, model_name, device, split, learning_rate))
        say(f"{device}: probed {variant.label}: {_probe_rate(trainers[-1]):,.0f} images/s "
            f"({time.perf_counter() - start:.1f} s)")
    return trainers


def _rounds(trainers: Sequence[_Trainer], device: str, epochs: int, baseline_epoch: float,
            say: Callable[[str], None]) -> None:
    """Time-box the slow variants, then train every working one in `epochs` interleaved rounds."""
    from gpubench import devices  # noqa: PLC0415

    for t in trainers:
        if t.status != "ok":
            say(f"{device}: {t.variant.label}: {t.status}: {t.error}")
            continue
        _decide_box(t, baseline_epoch)
        if t.boxed_steps is not None:
            say(f"{device}: {t.variant.label} projects {_projected_epoch(t):,.0f} s per epoch "
                f"({_projected_epoch(t) / baseline_epoch:,.0f}x the baseline): time-boxed to "
                f"{t.boxed_steps} steps per round")
    for round_index in range(epochs):
        start = time.perf_counter()
        for t in (t for t in trainers if t.status == "ok"):
            try:
                with devices.scope(device):
                    t.round_seconds.append(t.timed(t.boxed_steps, monitor=True))
            except Exception as exc:  # noqa: BLE001 - an OOM is a result; the rest go on
                t.fail(exc)
                continue
            if round_index > 0:
                t.steps_done += t.boxed_steps or t.steps_per_epoch
        say(f"{device}: round {round_index + 1}/{epochs} done "
            f"({time.perf_counter() - start:.1f} s)")


def measure_device(
    model_name: str,
    split,
    device: str,
    values: dict[str, Sequence],
    *,
    epochs: int,
    learning_rate: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[_Trainer]:
    """Probe and run the one-factor variants in interleaved rounds; then the combination of the
    values they found fastest, in rounds interleaved with a fresh baseline."""
    say = progress or (lambda text: None)
    values, _ = for_backend(values, backends.current().NAME,
                            backends.part("feeds").tf_data_available())
    trainers = _prepare_all(variants(values), model_name, device, split, learning_rate, say)
    baseline_epoch = _projected_epoch(trainers[0])
    _rounds(trainers, device, epochs, baseline_epoch, say)
    for t in trainers:  # evaluated now: every variant after the same number of epochs
        t.evaluate(split)
    combined = Variant("combined", **best_settings(trainers))
    say(f"{device}: each factor's fastest value in the rounds: {combined.label}")
    pair = _prepare_all([BASELINE, combined], model_name, device, split, learning_rate, say)
    _rounds(pair, device, epochs, baseline_epoch, say)
    pair[1].evaluate(split)
    if pair[0].status == "ok":
        pair[1].paired_baseline_seconds = pair[0].round_seconds
    return [*trainers, pair[1]]


def _record(trainer: _Trainer, split, *, data, model_name: str, epochs: int, env: str,
            notebook: str) -> dict:
    """The train record of one measured variant, with the telemetry of its rounds."""
    from gpubench import results, telemetry, training  # noqa: PLC0415

    v = trainer.variant
    common = dict(notebook=notebook, env=env, device=trainer.device, model=model_name,
                  dataset=data.name, data_source=data.source, data_verified=data.verified,
                  epochs=epochs,
                  batch_size=v.batch_size, train_samples=len(split.x_train), factor=v.factor,
                  precision=v.precision, steps_per_execution=v.steps_per_execution,
                  input_pipeline=v.input_pipeline,
                  jit_compile=backends.current().jit_compile(v.xla) is True,
                  telemetry=(telemetry.combine(trainer.round_telemetry)
                             if trainer.round_telemetry else None),
                  **telemetry.epoch_fields(trainer.round_telemetry))
    if trainer.status != "ok" or len(trainer.round_seconds) < 2:
        return results.make_record("train", status=trainer.status if trainer.status != "ok"
                                   else "error", error=trainer.error or "no steady round",
                                   epoch_seconds=list(trainer.round_seconds), **common)
    common.update(training.mode_fields(trainer.model, input_pipeline=v.input_pipeline))
    # Epoch statistics as every train record has them; the rate below is this chapter's own.
    times = training.timing_fields(trainer.round_seconds, len(split.x_train),
                                   common["flops_per_sample"])
    record = results.make_record(
        "train", **times, steady_epoch_min=min(trainer.round_seconds[1:]),
        test_accuracy=trainer.test_accuracy, test_loss=trainer.test_loss,
        paired_baseline_seconds=trainer.paired_baseline_seconds,
        steps_measured=trainer.steps_done, time_boxed=trainer.boxed_steps is not None, **common)
    # Its rate: the fastest steady round, counting only the steps a time-boxed round measured.
    record["samples_per_second"] = max(round_rates(record))
    if record.get("flops_per_sample"):
        record["achieved_gflops"] = record["flops_per_sample"] * record["samples_per_second"] / 1e9
    return record


def run(
    model_name: str,
    data,
    device_names: Sequence[str] | None,
    values: dict[str, Sequence],
    *,
    epochs: int,
    store=None,
    env: str | None = None,
    notebook: str = "Speed_Factors",
    progress: Callable[[str], None] | None = None,
) -> list[dict]:
    """Measure every variant on every device; store and return one train record per variant.

    The values are those `for_backend` keeps (on JAX no XLA variant, noted through
    `progress`); tf.data where TensorFlow cannot be imported is refused (ValueError) before
    anything trains."""
    from gpubench import devices, results, training  # noqa: PLC0415 - loads Keras

    if model_name not in MODELS:
        raise ValueError(f"model {model_name!r} is not one Speed_Factors trains; "
                         f"use one of {', '.join(MODELS)}")
    positive_int("epochs", epochs, minimum=2)
    values, notes = for_backend(values, backends.current().NAME,
                                backends.part("feeds").tf_data_available())
    for note in notes:
        (progress or (lambda text: None))(note)
    if device_names is None:  # every device of the env, GPUs first
        device_names = devices.list_devices()[1:] + ["cpu"]
    env = env or results.default_env_name()
    split = training.prepare(model_name, data)
    records = []
    for device in [devices.resolve(name) for name in device_names]:
        trainers = measure_device(model_name, split, device, values, epochs=epochs,
                                  progress=progress)
        for trainer in trainers:
            record = _record(trainer, split, data=data, model_name=model_name, epochs=epochs,
                             env=env, notebook=notebook)
            if store is not None:
                store.append(record)
            records.append(record)
    return records
