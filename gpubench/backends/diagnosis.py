"""Why a backend sees no GPU, and the fix (the words: gpubench/tables/diagnosis.json); loaded only
when a GPU is asked for and missing."""

from __future__ import annotations

import json
import os
import platform
import shutil
from pathlib import Path
from types import ModuleType

from gpubench import machine

WORDS = Path(__file__).parents[1] / "tables" / "diagnosis.json"


def cause(backend: ModuleType, smi: list[str] | None) -> str:
    """The entry of tables/diagnosis.json that says why `backend` sees no GPU."""
    platforms, hidden = os.environ.get("JAX_PLATFORMS", ""), os.environ.get("CUDA_VISIBLE_DEVICES")
    if backend.NAME == "jax" and platforms and "cuda" not in platforms and "gpu" not in platforms:
        return "jax_platforms"
    if smi is None and shutil.which("nvidia-smi"):
        return "driver_broken"
    if not smi:
        return "no_gpu"
    if platform.system() == "Windows" and backend.NAME != "torch":
        return "windows_" + backend.NAME
    if not backend.is_cuda_build():
        return "cpu_only_" + backend.NAME
    if hidden is not None and hidden.strip() in ("", "-1"):
        return "hidden"
    return "broken_" + backend.NAME


def diagnose(backend: ModuleType) -> str:
    """"Diagnosis: why `backend` sees no GPU", then "Fix: ...", from the machine and the build."""
    smi = machine.nvidia_smi_gpus()
    found = cause(backend, smi)
    if found == "broken_torch":
        backend.cuda_available()  # what torch warned, kept in `said`
    facts = {"title": backend.TITLE, "version": backend.version(), "gpu": (smi or [""])[0].strip(),
             "count": len(smi or []), "found": "not found" if smi is None else "lists none",
             "platforms": os.environ.get("JAX_PLATFORMS", ""),
             "hidden": os.environ.get("CUDA_VISIBLE_DEVICES"),
             "said": f" {backend.TITLE} said: {backend.said[0]}" if backend.said else "",
             "setup": "`gpubench doctor --gpu` names the command that makes it here"}
    if backend.NAME == "torch":
        facts.update(build=backend.torch().__version__, cuda=backend.torch().version.cuda)
    why, fix = json.loads(WORDS.read_text(encoding="utf-8"))[found]
    return f"Diagnosis: {why.format(**facts)}\nFix: {fix.format(**facts)}"
