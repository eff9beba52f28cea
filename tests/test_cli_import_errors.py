"""``python -m runner import`` / ``status`` / ``export`` on imports (issue 15, points 4, 5, 7, 8):
each problem found by trying the command line as a new user would, against the real
bench_serving and AIPerf files of tools/make_import_fixtures.py, on a real DuckDB file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from db import Store
from domain.importer.slim import OMITTED_KEY
from domain.plan.naming import MAX_NAME_CHARS, is_control
from domain.results.frames import points_frame
from tests.conftest import ROOT
from tools.make_import_fixtures import ISL, OSL, ensure_fixtures

pytestmark = pytest.mark.sglang  # the fixtures come from the real clients (scripts/setup_import_fixtures.sh)

OLD = "sglang-0.4.6.post5.jsonl"  # 35-key records, no server_info: nothing says what served them
NEW = "sglang-0.5.23.jsonl"  # server_info says "emulated": true (the fixtures ran against the emulator)
AIPERF_JSON = Path("aiperf") / "concurrency_1" / "profile_export_aiperf.json"


@pytest.fixture(scope="module")
def fixtures() -> Path:
    return ensure_fixtures()


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runner", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def imported(env: dict[str, str], path: Path, *options: str) -> list[int]:
    done = cli(env, "import", str(path), *options)
    assert done.returncode == 0, done.stderr
    return [int(run_id) for run_id in done.stdout.split()]


def copy_of(source: Path, target: Path, salt: int = 0) -> Path:
    """The same records under another name; trailing blank lines make the content (hash) its own."""
    target.write_bytes(source.read_bytes() + b"\n" * salt)
    return target


def status_rows(env: dict[str, str]) -> dict[int, str]:
    done = cli(env, "status")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    rows = done.stdout.splitlines()[1:]
    return {int(row.split()[0]): row for row in rows}


# -- runner status -----------------------------------------------------------------------------


def test_status_lists_imports_without_model_or_gpu(env: dict[str, str], fixtures: Path) -> None:
    [old] = imported(env, fixtures / OLD)
    [aiperf] = imported(env, fixtures / AIPERF_JSON)
    rows = status_rows(env)
    assert "?x?" in rows[old] and " ? " in rows[old]  # unknown GPU and model, never "None"
    assert "3/3" in rows[old] and "1/1" in rows[aiperf]  # an import's points are all there
    assert "Qwen/Qwen3-30B-A3B" in rows[aiperf] and "None" not in rows[aiperf]


# -- --gpu -------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["CPU:1", "H200", "0xH200", "x8", "H200x"])
def test_an_unreadable_gpu_is_one_line_and_exit_2(env: dict[str, str], fixtures: Path, db_path: Path,
                                                   value: str) -> None:
    done = cli(env, "import", str(fixtures / OLD), "--gpu", value)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert f"--gpu {value!r}" in line and "H200x8" in line
    assert not db_path.exists() or Store(db_path).list_runs() == []


def test_the_gpu_message_follows_the_language(env: dict[str, str], fixtures: Path) -> None:
    done = cli(env, "--lang", "ja", "import", str(fixtures / OLD), "--gpu", "CPU:1")
    assert done.returncode == 2 and "読めません" in done.stderr


@pytest.mark.parametrize(("value", "expected"), [("H200x8", ("H200", 8)), ("8xH200", ("H200", 8)),
                                                 ("RTX6000x2", ("RTX6000", 2))])
def test_readable_gpus_are_stored(env: dict[str, str], fixtures: Path, db_path: Path, value: str,
                                  expected: tuple[str, int]) -> None:
    [run_id] = imported(env, fixtures / OLD, "--gpu", value)
    run = Store(db_path).get_run(run_id)
    assert (run.gpu_type, run.gpu_count) == expected


def test_a_statement_error_is_one_line_per_problem(env: dict[str, str], fixtures: Path) -> None:
    done = cli(env, "import", str(fixtures / OLD), "--gpu", "H200x9999")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "gpu_count" in line and "512" in line


# -- refused imports leave no log entry ------------------------------------------------------------


def _records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.parametrize("kind", ["json_array", "refused_as_completed", "unknown_concurrency"])
def test_a_refused_import_leaves_no_log_entry(env: dict[str, str], fixtures: Path, db_path: Path, tmp_path: Path,
                                              kind: str) -> None:
    """Before: the refused import was logged with no runs, so the retry said "imported already (runs )"."""
    if kind == "json_array":
        path = tmp_path / "records.json"
        path.write_text(json.dumps(_records(fixtures / OLD), indent=2), encoding="utf-8")
        why = "one JSON array"
    elif kind == "refused_as_completed":
        path, why = fixtures / "all-failed-rejected-0.5.23.jsonl", "not one output token came back"
    else:  # AIPerf's CSV carries no configuration: no concurrency for the sweep axis
        path, why = fixtures / "aiperf" / "concurrency_1" / "profile_export_aiperf.csv", "profile_export_aiperf.json"
    for _attempt in range(2):
        done = cli(env, "import", str(path))
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert why in done.stderr and "nothing was written" in done.stderr
        assert "imported already" not in done.stderr
        store = Store(db_path)
        assert store.list_imports() == [] and store.list_runs() == []


def test_a_json_array_is_named_in_both_languages(env: dict[str, str], fixtures: Path, tmp_path: Path) -> None:
    path = tmp_path / "records.json"
    path.write_text(json.dumps(_records(fixtures / OLD)), encoding="utf-8")  # one line: still an array
    english, japanese = cli(env, "import", str(path)), cli(env, "--lang", "ja", "import", str(path))
    assert "one JSON array" in english.stderr and "one JSON object per line" in english.stderr
    assert "JSON 配列" in japanese.stderr and "Nothing was imported" not in japanese.stderr
    assert "fails" not in english.stderr  # no word about failed requests: none failed


# -- one long line -----------------------------------------------------------------------------------


MEASURE = """
import sys, time
from pathlib import Path
from db import Store
from db.imported_runs import import_file
from domain.importer.conditions import ImportConditions
from tests.support.actors import operator

def kib(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])

store = Store(Path(sys.argv[2])); store.migrate()
Path("/proc/self/clear_refs").write_text("5")  # Linux: VmHWM restarts from now, so the peak is the import's
before = kib("VmRSS")
started = time.perf_counter()
result = import_file(store, Path(sys.argv[1]), ImportConditions(), actor=operator("t"))
print(result.run_ids, result.points, time.perf_counter() - started, (kib("VmHWM") - before) * 1024)
"""


def _long_record_line(fixtures: Path, target_bytes: int) -> bytes:
    """The real --output-details record, its per-request arrays repeated to ``target_bytes``."""
    [record] = _records(fixtures / "sglang-0.5.23-details.jsonl")
    arrays = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors")
    factor = max(1, target_bytes // len(json.dumps({key: record[key] for key in arrays})))
    for key in arrays:
        record[key] = record[key] * factor
    return json.dumps(record).encode() + b"\n"


@pytest.mark.slow
def test_a_100_mb_line_imports_in_bounded_memory(env: dict[str, str], fixtures: Path, db_path: Path,
                                                 tmp_path: Path) -> None:
    """Before: a 100 MB line cost about 1 GB (json.loads of it, the raw copy, its JSON for
    the DB).  Now the per-request arrays of a line over 8 MB are counted, not built
    (domain/importer/slim.py): the import's peak stays under 3x the line."""
    path = tmp_path / "long.jsonl"
    path.write_bytes(_long_record_line(fixtures, 100 * 1024 * 1024))
    size = path.stat().st_size
    done = subprocess.run([sys.executable, "-c", MEASURE, str(path), str(db_path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    run_ids, points, seconds, growth = _parse(done.stdout)
    print(f"\n{size / 2**20:.0f} MiB line: imported in {seconds:.1f} s, peak RSS growth {growth / 2**20:.0f} MiB")
    assert points == 1 and growth < 3 * size
    [point] = Store(db_path).points_of(run_ids[0])
    raw = json.loads(point.raw_record)
    assert raw[OMITTED_KEY]["itls"] == raw[OMITTED_KEY]["errors"] == point.requested > 0
    assert "itls" not in raw and point.completed == json.loads(path.read_bytes())["completed"]


def _parse(stdout: str) -> tuple[list[int], int, float, int]:
    head, points, seconds, growth = stdout.strip().rsplit(maxsplit=3)
    return json.loads(head), int(points), float(seconds), int(growth)


# -- lengths, provenance, names ------------------------------------------------------------------------


def test_imported_points_carry_their_lengths(env: dict[str, str], fixtures: Path, db_path: Path) -> None:
    """So a comparison can line an imported ``in64-out32`` up with a plan's scenario of the
    same lengths, whatever its name (the alignment itself is the comparison's)."""
    run_ids = [*imported(env, fixtures / NEW), *imported(env, fixtures / AIPERF_JSON)]
    frame = points_frame(p.as_dict() for p in Store(db_path).points_for_comparison(run_ids))
    first_run = frame[frame["run_id"] == run_ids[0]]
    assert set(first_run["input_len"]) == {ISL} and set(first_run["output_len"]) == {OSL}
    aiperf = frame[frame["run_id"] == run_ids[-1]]
    assert set(aiperf["input_len"]) == {ISL} and set(aiperf["output_len"]) == {OSL}
    assert frame["input_len"].notna().all() and frame["output_len"].notna().all()


def test_emulator_output_stays_emulated_when_imported(env: dict[str, str], fixtures: Path, db_path: Path,
                                                      tmp_path: Path) -> None:
    """Its server_info says emulated (or the user states --engine emulator): the run's source is
    ``emulated`` (compared, labelled and exported as emulated), and it is still known to be an import."""
    new = imported(env, fixtures / NEW, "--gpu", "H200x1")
    stated = imported(env, copy_of(fixtures / OLD, tmp_path / "stated.jsonl", 1), "--engine", "emulator")
    [plain] = imported(env, fixtures / OLD)
    store = Store(db_path)
    assert [store.get_run(r).source for r in [*new, *stated, plain]] == ["emulated"] * 3 + ["imported"]
    run = store.get_run(new[0])
    assert (run.engine, run.emulated, run.plan) == ("sglang", True, "{}")  # stored as family + emulated
    rows = status_rows(env)
    assert "emulated (imported)" in rows[new[0]] and "emulated (imported)" in rows[stated[0]]
    assert "emulated" not in rows[plain]

    refused = cli(env, "export", "--baseline", str(plain), "--runs", str(new[0]), "--out", str(tmp_path / "out"))
    assert refused.returncode == 1 and f"emulated runs (#{new[0]})" in refused.stderr


def test_a_file_name_is_stored_as_text(env: dict[str, str], fixtures: Path, db_path: Path, tmp_path: Path) -> None:
    """Any text is a name (exports neutralise formulas and markup); control characters go and
    the name is cut to MAX_NAME_CHARS with its ``#n``."""
    formula = imported(env, copy_of(fixtures / OLD, tmp_path / '=HYPERLINK("x","y").jsonl', 1))
    long_name = "ベース\x07ライン\t" + "x" * 200 + ".jsonl"
    controlled = imported(env, copy_of(fixtures / OLD, tmp_path / long_name, 2))
    store = Store(db_path)
    assert store.get_run(formula[0]).name == '=HYPERLINK("x","y")#1'
    name = store.get_run(controlled[0]).name
    assert name.startswith("ベースラインxxx") and name.endswith("#1") and len(name) == MAX_NAME_CHARS
    assert not any(is_control(c) for c in name)
    newest = store.list_imports()[0]  # newest first
    assert newest.file_name.startswith("ベースライン") and not any(is_control(c) for c in newest.file_name)
    rows = status_rows(env)
    assert '=HYPERLINK("x","y")#1' in rows[formula[0]]
