"""The report over many run dirs: each file read once, charts that stay readable."""

from __future__ import annotations

import json
import weakref
from pathlib import Path

import pytest
from PIL import Image

from conftest import REPO
from gpubench import report, results, rundir
from gpubench.report import format as report_format
from gpubench.report import inputs

TEMPLATE = REPO / "reference" / "h200-jax" / "results.jsonl"
DIRS = 12  # 24 columns, past every chart's cap
MAX_PNG_HEIGHT = 2000  # pixels: a screen or two


def _copies(tmp_path: Path, dirs: int) -> list[Path]:
    """`dirs` run dirs, each the stored H200 run as machine host-k with run ids of its own."""
    template = [json.loads(line) for line in TEMPLATE.read_text(encoding="utf-8").splitlines()]
    found = []
    for k in range(dirs):
        path = tmp_path / f"run{k:02d}"
        path.mkdir()
        lines = [json.dumps(r | {"run_id": f"{r['run_id']}-{k}",
                                 "environment": r["environment"] | {"hostname": f"host-{k}"}})
                 for r in template]
        (path / "results.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        found.append(path)
    return found


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], Path, list[Path]]:
    """The report of DIRS run dirs: the dirs, report.md, and each results file it read."""
    tmp = tmp_path_factory.mktemp("many")
    dirs = _copies(tmp, DIRS)
    read: list[Path] = []
    real = rundir.iter_records
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rundir, "iter_records",
                   lambda path, *a, **k: read.append(Path(path)) or real(path, *a, **k))
        built = report.build(dirs, tmp / "out")
    return dirs, built, read


def test_each_file_is_read_once(many):
    dirs, _, read = many
    assert sorted(read) == sorted(dirs)


def test_charts_stay_readable(many):
    _, built, _ = many
    pngs = sorted(built.parent.glob("*.png"))
    assert {p.name for p in pngs} >= {"matmul_time.png", "matmul_speedup.png",
                                      "epoch_times.png", "speed_factors.png"}
    for png in pngs:
        width, height = Image.open(png).size
        assert height <= MAX_PNG_HEIGHT and width <= MAX_PNG_HEIGHT, (png.name, width, height)


def test_report_says_what_the_charts_leave_out(many):
    _, built, _ = many
    text = built.read_text(encoding="utf-8")
    capped = f"first {report_format.MAX_COLUMNS} of the {2 * DIRS} columns"
    assert text.count(capped) == 2  # the matmul charts and the epoch chart
    assert f"of the {DIRS} columns" in text  # speed factors: the jax-gpu columns only
    for k in range(DIRS):  # the tables keep every machine
        assert f"### host-{k} · jax-gpu" in text


def test_capped_keeps_the_first_columns_in_the_tables_order():
    records = [{"env": env, "_column": f"{host} · {env}", "environment": {"hostname": host}}
               for host in ("b", "a", "c", "d") for env in ("cpu", "gpu")]
    shown, text = report_format.capped(records)
    assert {r["_column"] for r in shown} == {"a · cpu", "a · gpu", "b · cpu", "b · gpu",
                                             "c · cpu", "c · gpu"}
    assert "first 6 of the 8 columns" in text and "(a · cpu to c · gpu)" in text
    assert report_format.capped(records[:6]) == (records[:6], "")


def test_many_runs_in_one_file_make_one_line_per_job(tmp_path):
    template = json.loads(TEMPLATE.read_text(encoding="utf-8").splitlines()[0])
    path = tmp_path / "run"
    path.mkdir()
    lines = [json.dumps(template | {"run_id": f"r{k}"}) for k in range(5)]
    (path / "results.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    problems: list[str] = []
    with pytest.warns(UserWarning, match="holds runs"):
        records = inputs.load([path], problems)
    assert [r["run_id"] for r in records] == ["r4"]
    assert len(problems) == 1
    assert "holds runs r0, r1, r2 and 2 more; shown: run r4" in problems[0]


class _Record(dict):
    """A record that a weak reference can watch."""


def test_a_replaced_run_is_let_go_while_the_file_is_read():
    template = json.loads(TEMPLATE.read_text(encoding="utf-8").splitlines()[0])
    refs, alive = [], []

    def stream():
        for k in range(20):  # 20 runs of the same three measurements, each replacing the last
            for size in (1, 2, 3):
                record = _Record(template | {"run_id": f"r{k}", "size": size, "_run_dir": "run"})
                refs.append(weakref.ref(record))
                yield record
                del record
            alive.append(sum(ref() is not None for ref in refs))

    with pytest.warns(UserWarning, match="holds runs r0, r1, r2 and 17 more"):
        shown = inputs.last_runs(stream(), [])
    assert [(r["run_id"], r["size"]) for r in shown] == [("r19", 1), ("r19", 2), ("r19", 3)]
    assert max(alive) == 3  # only the last run's records were ever held


def _scaling(env: str, backend: str, engine: str, strategy: str, rate: float,
             efficiency: float) -> dict:
    """A two-process scaling record of `backend`, as `gpubench scaling --local-workers 2` writes."""
    template = json.loads(TEMPLATE.read_text(encoding="utf-8").splitlines()[0])
    environment = template["environment"] | {"hostname": "vm", "backend": backend}
    return results.make_record(
        "scaling", notebook="gpubench scaling", env=env, device="127.0.0.1:1,127.0.0.1:2",
        devices=["127.0.0.1:1", "127.0.0.1:2"], environment=environment, model="mlp_h1000",
        strategy=strategy, engine=engine, collective="gloo", all_reduce="ring", replicas=2,
        workers=2, global_batch_size=200, per_replica_batch_size=100, scaling="weak",
        samples_per_second=rate, scaling_efficiency=efficiency, step_seconds=0.05,
        test_accuracy=0.9)


def test_the_scaling_section_puts_every_backend_side_by_side(tmp_path):
    """TensorFlow's, JAX's and PyTorch's two-process runs in one table: engine, images/s, the
    ideal (images/s over efficiency), efficiency, step time, accuracy."""
    runs = {"cpu": _scaling("cpu", "tensorflow", "tf.distribute", "multi_worker", 1800.0, 0.9),
            "jax-cpu": _scaling("jax-cpu", "jax", "jax.distributed", "data_parallel", 1500.0,
                                0.75),
            "torch-cpu": _scaling("torch-cpu", "torch", "torch.distributed", "ddp", 400.0, 0.5)}
    dirs = []
    for env, record in runs.items():
        (tmp_path / env).mkdir()
        results.ResultsStore(tmp_path / env / "results.jsonl").append(record)
        dirs.append(tmp_path / env)
    text = report.build(dirs, tmp_path / "out").read_text(encoding="utf-8")
    section = text[text.index("## Scaling"):]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| vm · ")]
    assert [row[1:] for row in rows[:3]] == [
        ["tf.distribute", "multi_worker", "2", "2", "127.0.0.1:1, 127.0.0.1:2", "200", "1,800",
         "2,000", "90%", "50 ms", "ring", "0.900"],
        ["jax.distributed", "data_parallel", "2", "2", "127.0.0.1:1, 127.0.0.1:2", "200",
         "1,500", "2,000", "75%", "50 ms", "ring", "0.900"],
        ["torch.distributed", "ddp", "2", "2", "127.0.0.1:1, 127.0.0.1:2", "200", "400", "800",
         "50%", "50 ms", "ring", "0.900"]]
    assert [row[0] for row in rows[:3]] == ["vm · cpu", "vm · jax-cpu", "vm · torch-cpu"]
