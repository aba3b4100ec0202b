"""A pytest plugin for the nbval subprocess the tests start: the gpubench modules each chapter
loaded. With `-p nbval_modules` and GPUBENCH_NBVAL_MODULES=DIR, after a notebook's last cell its
kernel is asked which gpubench modules it holds, and DIR/<name>.json gets {module: file}; so the
tier test reads the chapters' one nbval execution instead of running them again.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest

QUERY = ("__import__('json').dumps({n: getattr(m, '__file__', None) for n, m in "
         "list(__import__('sys').modules.items()) if n == 'gpubench' or n.startswith('gpubench.')})")


def loaded_modules(kernel, timeout: float = 60) -> dict[str, str | None]:
    """{gpubench module: its file} of what the nbval kernel has imported so far."""
    msg_id = kernel.kc.execute("", silent=True, user_expressions={"modules": QUERY})
    while True:
        reply = kernel.kc.get_shell_msg(timeout=timeout)
        if reply["parent_header"].get("msg_id") == msg_id:
            found = reply["content"]["user_expressions"]["modules"]
            return json.loads(ast.literal_eval(found["data"]["text/plain"]))


@pytest.hookimpl(tryfirst=True)  # before nbval's teardown stops the kernel
def pytest_runtest_teardown(item, nextitem) -> None:
    """After the last cell of a notebook, write the modules its kernel loaded."""
    folder = os.environ.get("GPUBENCH_NBVAL_MODULES")
    kernel = getattr(item.parent, "kernel", None)
    if not folder or kernel is None or not kernel.is_alive():
        return
    if nextitem is not None and nextitem.parent is item.parent:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    (Path(folder) / f"{Path(str(item.fspath)).stem}.json").write_text(
        json.dumps(loaded_modules(kernel), indent=1), encoding="utf-8")
