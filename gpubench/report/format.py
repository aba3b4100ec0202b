"""The report's glossary: one definition per quantity, as the code computes it. Table headers link
to it (`explained_table`); the glossary section lists the terms a report uses."""

from __future__ import annotations

from gpubench.fmt import MISSING, NOT_A_NUMBER, md_table
from gpubench.timing import NOISE_THRESHOLD, STEADY_EPOCHS

NO_GPU_HINT = ("What a GPU would give: reference/h200-jax (one NVIDIA H200), beside your run with "
               "`gpubench report <your run> reference/h200-jax`; for a GPU of your own, `gpubench "
               "doctor --gpu` says what this machine needs (`gpubench envs` lists the envs)")
_STEADY = f"the steady epochs ({STEADY_EPOCHS}: epoch 1, which compiles, left out)"
GLOSSARY = {
    "baseline": "the CPU env of the same machine and backend; of two runs of it, the one in the "
                "book's mode (XLA off, float32), else the earlier",
    "not like for like": "the two ran in different modes (compiled, precision, TF32, batch, "
                         "steps per execution, input pipeline) or data sizes",
    "float32 (TF32)": "float32 whose matmuls ran on TF32 tensor cores (10-bit mantissa): not "
                      "like for like with a CPU's float32",
    "loaded": "the load average exceeded the machine's cores while the figure was taken",
    "throttled": "the GPU's SM clock fell below 75 % of its maximum during the region",
    "mode": "XLA (PyTorch: torch.compile) on or off, precision, batch size, steps per execution, "
            "input pipeline (arrays: NumPy arrays given to `fit`)",
    "total time": "all epochs, as the book times them: the book's figure",
    "steady epoch": f"the median of {_STEADY}",
    "first epoch": "epoch 1, tracing and compiling included",
    "time saved vs CPU env": "1 − total time / the baseline's total time",
    "speedup": "the baseline's total time over this row's (above 1: faster)",
    "energy (all epochs)": "the GPU's (NVML) and the CPU package's (RAPL), kept apart",
    "data": "the dataset and its source (keras, dir, or synthetic: timings only)",
    "images/s": "training images per second in the steady epochs (Speed_Factors: fastest round)",
    "ratio": "images/s over the reference row's (the first backend's, same mode if it ran)",
    "like for like?": "whether the modes and the training-set size match the reference row's",
    "GPU busy": f"NVML's share of time a GPU kernel ran (not how full the GPU was), the median "
                f"over {_STEADY}; \"(run mean)\": the whole run's mean, compiling included",
    "GPU mean power": "the board's mean power draw while the epochs ran",
    "GPU energy per steady epoch": "the median over the epochs of GPU busy",
    "images per joule (GPU)": "training images per joule of GPU energy in a steady epoch",
    "CPU use (one core = 100 %)": "this process's CPU time over wall time",
    "CPU energy per epoch": "the CPU package's energy (RAPL) over all epochs, divided by them",
    "images per joule (CPU)": "training images per joule of CPU package energy",
    "size": "n, for the product of two n x n matrices",
    "product time": "per product, queued back to back, one sync per block: what the arithmetic "
                    "costs",
    "call latency": "one product from the call until its result is ready on the device (a sync)",
    "launch and sync per call": "call latency minus product time; \"none\": within the noise",
    "book's single timing": "one timing as the book took it, matrices and set-up included (on "
                            "JAX, compiling each new shape)",
    "of which set-up": "the book's timing minus a second book-way call of the same shape",
    "GFLOP/s": "2n³ over the product time; for a model, its FLOPs per image x images/s",
    "% of datasheet peak": "GFLOP/s over the datasheet's figure at this dtype (TF32's for TF32)",
    "% of achievable": "GFLOP/s over this env's peak probe: what this device reaches",
    "spread": "IQR over median of the blocks' per-product times",
    "noisy": f"spread still above {NOISE_THRESHOLD:.0%} at the time cap: no crossover is read "
             "from it",
    "crossover": "the smallest paired size (timed on the GPU and its CPU) from which the GPU wins "
                 "at every larger one",
    "streaming crossover": "the crossover by the product time",
    "variant": "one factor changed from the book's setting; tf.data: a tf.data.Dataset; "
               "on_device: the training set kept on the device",
    "x vs baseline (min)": "the variant's fastest steady round over its baseline's (images/s); "
                           "†: against its own paired baseline rounds",
    "median x": "the same with each one's median round",
    "interval": "the lowest and highest ratio of paired rounds: a min–max, not a confidence "
                "interval; one that includes 1.0 is \"no clear effect\"",
    "steps": "training steps timed in the steady rounds (time-boxed: a fixed number per round)",
    "% of matmul": "GFLOP/s over the peak probe of the env, device and compute dtype; n/a: the "
                   "probe did not run there",
    "test accuracy": "after training; not measured for a time-boxed variant",
    "engine": "what runs the replicas across processes: tf.distribute, jax.distributed, "
              "torch.distributed",
    "strategy": "mirrored on one machine, multi_worker across processes or machines",
    "workers": "processes (machines) taking part",
    "replicas": "copies of the model training in parallel, one per device",
    "global batch": "images per step over all replicas",
    "samples/s": f"training images per second, from the median of {STEADY_EPOCHS}",
    "ideal samples/s": "the one-replica samples/s x the replicas",
    "scaling efficiency": "samples/s over the ideal samples/s (100%: perfect scaling)",
    "step time": "one training step of one worker, the median of the steady steps",
    "all-reduce": "how the replicas' gradients are added up",
    "status": "failed: the notebook raised an error; skipped: not run; interrupted: stopped by "
              "Ctrl-C, a signal or a time limit",
    "commit": "the checkout's git commit; \"-dirty\": with changes not committed",
}


def explained_table(headers: list[str], rows: list[list], right=()) -> list[str]:
    """Markdown lines: the table, each header the glossary defines linked to it."""
    linked = [f"[{h}](#glossary)" if h in GLOSSARY else h for h in headers]
    return [md_table(linked, rows, [f"[{h}](#glossary)" for h in right] + list(right)), ""]


def glossary(text: str) -> list[str]:
    """The glossary section: each term `text` uses, once."""
    used = [term for term in GLOSSARY if term in text]
    return ["## Glossary", "", f"\"{MISSING}\": not measured; \"{NOT_A_NUMBER}\": no figure can be "
            "given (why, in brackets, where known).", "",
            *(f"- **{term}**: {GLOSSARY[term]}." for term in used), ""]
