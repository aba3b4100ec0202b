"""Why a backend sees no GPU, and the fix (the words: gpubench/tables/diagnosis.json); loaded only
when a GPU is asked for and missing."""

import json
import os
import platform
import shutil
from pathlib import Path

from gpubench import backends, machine

WORDS = Path(__file__).parents[1] / "tables" / "diagnosis.json"


def diagnose() -> str:
    """"Diagnosis: why the backend sees no GPU", then "Fix: ...", from the machine and the build."""
    backend, smi = backends.current(), machine.nvidia_smi_gpus()
    name, platforms = backend.NAME, os.environ.get("JAX_PLATFORMS", "")
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    jax_off = name == "jax" and platforms and "cuda" not in platforms and "gpu" not in platforms
    found = ("jax_platforms" if jax_off  # the entry of tables/diagnosis.json
             else "driver_broken" if smi is None and shutil.which("nvidia-smi")
             else "no_gpu" if not smi
             else "windows_" + name if platform.system() == "Windows" and name != "torch"
             else "cpu_only_" + name if not backend.is_cuda_build()
             else "hidden" if hidden is not None and hidden.strip() in ("", "-1")
             else "broken_" + name)
    if found == "broken_torch":
        backend.cuda_available()  # what torch warned, kept in `said`
    facts = {"title": backend.TITLE, "version": backend.version(), "gpu": (smi or [""])[0].strip(),
             "count": len(smi or []), "found": "not found" if smi is None else "lists none",
             "platforms": platforms, "hidden": hidden,
             "said": f" {backend.TITLE} said: {backend.said[0]}" if backend.said else "",
             "setup": "`gpubench doctor --gpu` names the command that makes it here"}
    if name == "torch":
        facts.update(build=backend.torch().__version__, cuda=backend.torch().version.cuda)
    why, fix = json.loads(WORDS.read_text(encoding="utf-8"))[found]
    return f"Diagnosis: {why.format(**facts)}\nFix: {fix.format(**facts)}"
