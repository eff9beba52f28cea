"""The importer against files written by the REAL clients (never hand-written fixtures).

``tools/make_import_fixtures.py`` runs bench_serving 0.5.23 (Python and Rust clients),
bench_serving 0.4.6.post5 and aiperf 0.13.0 against the emulator; the session fixture
below makes them on first use (or finds them made by the test set-up).  Broken files are
made from those real records: cut, corrupted, repeated.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from domain.core.i18n import LANGUAGES, t
from domain.importer import (
    FileChanged,
    ImportConditions,
    ImportPreview,
    LineProblem,
    check_server_command,
    group_runs,
    iter_point_rows,
    preview_import,
    run_statement,
)
from domain.importer.types import PROBLEM_CODES
from domain.results.bench_record import json_safe
from tools.make_import_fixtures import AIPERF_CONCURRENCY, CONCURRENCY, ISL, OSL, ensure_fixtures, prompts_for

# The first test's set-up may generate the fixtures (~100 s here, ~4 min with a fresh .venv-aiperf).
pytestmark = [pytest.mark.sglang, pytest.mark.timeout(900)]

BENCH_FILES = ("sglang-0.5.23.jsonl", "sglang-0.5.23-details.jsonl", "sglang-0.5.23-rust.jsonl",
               "sglang-0.4.6.post5.jsonl", "sglang-0.4.6.post5-details.jsonl")
STAT_KEYS = {"mean": "mean", "median": "median", "p90": "p90", "p95": "p95", "p99": "p99"}
LATENCY_SUFFIX = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "itl_ms", "e2e": "e2e_latency_ms"}
RECORD_KEY_OF_COLUMN = {
    "completed": "completed", "duration_s": "duration", "request_throughput": "request_throughput",
    "input_throughput": "input_throughput", "output_throughput": "output_throughput",
    "total_throughput": "total_throughput", "achieved_concurrency": "concurrency",
    **{f"{name}_{stat}_ms": f"{key}_{suffix}" for name, suffix in LATENCY_SUFFIX.items()
       for stat, key in STAT_KEYS.items()},
}


@pytest.fixture(scope="session")
def fixtures() -> Path:
    """Generated on first use if missing or stale; generation failing fails the tests."""
    return ensure_fixtures()


@pytest.fixture(scope="session")
def manifest(fixtures: Path) -> dict[str, Any]:
    return dict(json.loads((fixtures / "manifest.json").read_text(encoding="utf-8")))


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def preview_bytes(data: bytes, name: str = "upload.jsonl") -> ImportPreview:
    return preview_import(io.BytesIO(data), file_name=name)


# -- bench_serving: every typed column equals the record ------------------------------------


@pytest.mark.parametrize("name", BENCH_FILES)
def test_every_typed_column_equals_the_records_value(fixtures: Path, name: str) -> None:
    path = fixtures / name
    expected = records(path)
    preview = preview_import(path)
    assert preview.problems == ()
    assert [p.line for p in preview.points] == list(range(1, len(expected) + 1))
    for point, record in zip(preview.points, expected, strict=True):
        for column, key in RECORD_KEY_OF_COLUMN.items():
            assert point.metrics[column] == record.get(key), (name, point.line, column)
        details = "errors" in record
        assert point.metrics["requested"] == (len(record["errors"]) if details else None)
        assert point.conditions["concurrency"] == record["max_concurrency"]
        assert (point.conditions["input_len"], point.conditions["output_len"]) == (
            record["random_input_len"], record["random_output_len"])
        assert point.conditions["random_range_ratio"] == record["random_range_ratio"] == 1.0
        assert point.conditions["dataset"] == record["dataset_name"] == "random-ids"
        assert point.conditions["backend"] == record["backend"] == "sglang"
        assert point.conditions["request_rate"] == "inf"


def test_old_records_have_35_keys_and_leave_new_statistics_empty(fixtures: Path) -> None:
    [record, *_] = records(fixtures / "sglang-0.4.6.post5.jsonl")
    assert len(record) == 35 and "server_info" not in record and "tag" not in record
    point = preview_import(fixtures / "sglang-0.4.6.post5.jsonl").points[0]
    assert point.record_format.family == "sglang-35"
    assert point.metrics["total_throughput"] is None and point.metrics["ttft_p90_ms"] is None
    assert point.metrics["itl_p95_ms"] == record["p95_itl_ms"]  # the one p95 the old client writes
    assert "tag" in point.unknown and point.server is None


def test_new_records_have_49_keys_plus_the_details_arrays(fixtures: Path) -> None:
    [plain, *_] = records(fixtures / "sglang-0.5.23.jsonl")
    [detailed] = records(fixtures / "sglang-0.5.23-details.jsonl")
    assert len(plain) == 49 and len(detailed) == 49 + 6
    point = preview_import(fixtures / "sglang-0.5.23-details.jsonl").points[0]
    assert point.record_format.family == "sglang-49" and point.record_format.extras == ("details",)
    assert point.conditions["num_prompts"] == point.metrics["requested"] == prompts_for(2)


def test_the_rust_client_writes_inf_as_a_string(fixtures: Path) -> None:
    text = (fixtures / "sglang-0.5.23-rust.jsonl").read_text(encoding="utf-8")
    assert '"request_rate":"inf"' in text and '"protocol":"http"' in text  # compact JSON, inf as text
    preview = preview_import(fixtures / "sglang-0.5.23-rust.jsonl")
    assert {p.record_format.family for p in preview.points} == {"sglang-rust"}
    assert {p.conditions["request_rate"] for p in preview.points} == {"inf"}


def test_bare_infinity_and_nan_are_read(fixtures: Path) -> None:
    line = (fixtures / "sglang-0.5.23.jsonl").read_text(encoding="utf-8").splitlines()[0]
    assert '"request_rate": Infinity' in line  # what the Python client really writes
    record = json.loads(line)
    with_nan = line.replace(json.dumps(record["mean_itl_ms"]), "NaN", 1)
    preview = preview_bytes(f"{line}\n{with_nan}\n".encode())
    first, second = preview.points
    assert first.conditions["request_rate"] == "inf"
    assert math.isnan(second.metrics["itl_mean_ms"])
    rows = list(iter_point_rows(io.BytesIO(f"{line}\n{with_nan}\n".encode()), preview))
    assert rows[0].raw["request_rate"] == "inf" and rows[1].raw["mean_itl_ms"] == "nan"  # strict-JSON safe


# -- runs, facts, unknowns -------------------------------------------------------------------


def test_consecutive_records_with_the_same_conditions_form_one_run(fixtures: Path) -> None:
    runs = preview_import(fixtures / "sglang-0.5.23.jsonl").runs
    assert [r.concurrencies for r in runs] == [CONCURRENCY, (1, 2)]
    assert [r.lines for r in runs] == [(1, 3), (4, 5)]
    assert runs[1].points[0].conditions["tag"] == "second"
    assert (runs[1].points[0].conditions["input_len"], runs[1].points[0].conditions["output_len"]) == (32, 16)
    assert runs[0].points[0].conditions["scenario"] == f"in{ISL}-out{OSL}"
    assert runs[0].server is not None and runs[0].server.fingerprint == runs[1].server.fingerprint


def test_a_different_client_or_a_repeated_concurrency(fixtures: Path) -> None:
    old = (fixtures / "sglang-0.4.6.post5.jsonl").read_bytes()
    new = (fixtures / "sglang-0.5.23.jsonl").read_bytes().splitlines(keepends=True)[:3]
    runs = preview_bytes(old + b"".join(new)).runs
    assert [(r.points[0].record_format.family, r.concurrencies) for r in runs] == [
        ("sglang-35", CONCURRENCY), ("sglang-49", CONCURRENCY)]
    twice = preview_bytes(b"".join(new) * 2).runs
    assert len(twice) == 1
    assert [p.conditions["repeat_idx"] for p in twice[0].points] == [0, 0, 0, 1, 1, 1]


def test_server_info_gives_facts_from_the_file(fixtures: Path) -> None:
    [record, *_] = records(fixtures / "sglang-0.5.23.jsonl")
    info = record["server_info"]
    server = preview_import(fixtures / "sglang-0.5.23.jsonl").runs[0].server
    assert server is not None and server.provenance == "file"
    assert server.version == info["version"]
    assert server.max_total_num_tokens == info["max_total_num_tokens"]
    assert server.emulated is True and server.model_path == info["model_path"]
    assert server.server_args["tp-size"] == info["tp_size"]
    assert server.server_args["mem-fraction-static"] == info["mem_fraction_static"]
    assert "internal_states" not in server.server_args and "max_total_num_tokens" not in server.server_args


def test_what_the_file_does_not_say_stays_unknown(fixtures: Path) -> None:
    preview = preview_import(fixtures / "sglang-0.5.23.jsonl")
    never = {"warmup", "seed", "dataset_path", "tokenize_prompt", "apply_chat_template", "thinking_mode",
             "ignore_eos", "flush_cache"}
    assert set(preview.conditions_unknown) == never | {"num_prompts"}
    assert all(p.conditions[name] is None for p in preview.points for name in never)
    assert all(p.metrics["requested"] is None for p in preview.points)
    assert {"input_len", "output_len", "concurrency", "dataset", "backend", "request_rate", "tag"} <= set(
        preview.conditions_detected)


def test_no_concurrency_limit_is_known_not_unknown(fixtures: Path) -> None:
    [record, *_] = records(fixtures / "sglang-0.5.23.jsonl")
    record["max_concurrency"] = None
    point = preview_bytes(json.dumps(record).encode()).points[0]
    assert point.conditions["concurrency"] is None and "concurrency" not in point.unknown


# -- broken lines ----------------------------------------------------------------------------


def test_a_truncated_line_is_reported_and_the_others_import(fixtures: Path) -> None:
    lines = (fixtures / "sglang-0.5.23.jsonl").read_bytes().splitlines(keepends=True)
    cut = lines[1][: len(lines[1]) // 2] + b"\n"
    preview = preview_bytes(lines[0] + cut + lines[2] + lines[3][:200])  # the last line has no newline
    assert [(p.line, p.code) for p in preview.problems] == [(2, "truncated"), (4, "truncated")]
    assert [p.line for p in preview.points] == [1, 3]
    assert "2" in preview.problems[0].text("en") and "2 行目" in preview.problems[0].text("ja")


def test_every_cut_of_a_real_record_reads_as_truncated(fixtures: Path) -> None:
    line = (fixtures / "sglang-0.4.6.post5-details.jsonl").read_text(encoding="utf-8").rstrip("\n")
    cuts = {end: preview_bytes(line[:end].encode()).problems[0].code for end in range(1, len(line))}
    assert {code for code in cuts.values()} == {"truncated"}, [end for end, code in cuts.items() if code != "truncated"]
    for garbage in ("garbage", "Traceback (most recent call last):", '{"a": nope, "b": 1}'):
        assert preview_bytes(garbage.encode()).problems[0].code == "not_json", garbage
    assert [p.code for p in preview_bytes(b"[1, 2").problems] == ["json_array"]  # what the file is, not its lines


def test_a_non_json_line_is_reported_with_its_number(fixtures: Path) -> None:
    lines = (fixtures / "sglang-0.4.6.post5.jsonl").read_bytes().splitlines(keepends=True)
    preview = preview_bytes(lines[0] + b"Traceback (most recent call last):\n\n" + lines[1] + b"[1, 2]\n")
    assert [(p.line, p.code) for p in preview.problems] == [(2, "not_json"), (5, "not_object")]
    assert [p.line for p in preview.points] == [1, 4]
    assert preview.line_count == 5


@pytest.mark.parametrize("lang", LANGUAGES)
def test_every_problem_has_a_text(lang: str) -> None:
    params = {"size": 1, "detail": "x", "column": 1, "keys": "a", "lines": 1, "completed": 2, "limit": 3}
    for code in PROBLEM_CODES:
        assert LineProblem(7, code, params).text(lang).strip()
    assert "x" in t("import.file_changed", lang, name="x")


def test_a_json_object_that_is_not_a_record(fixtures: Path) -> None:
    preview = preview_bytes(b'{"backend": "sglang", "completed": 3}\n')
    assert [(p.code, p.params["keys"]) for p in preview.problems[:1]] == [
        ("missing_keys", "duration, request_throughput, output_throughput, mean_ttft_ms")]


def test_python_clients_write_no_record_when_every_request_fails(manifest: dict[str, Any]) -> None:
    """What the real clients did: after a crash both Python clients exit with an error and
    write nothing; 0.4.6.post5 also stops at its warmup when the server refuses it."""
    outcomes = manifest["all_failed"]
    for key in ("crash-0.5.23", "crash-0.4.6.post5", "rejected-0.4.6.post5"):
        assert outcomes[key]["ok"] is False and outcomes[key]["record_written"] is False, outcomes[key]
    assert "ConnectionError" in outcomes["crash-0.5.23"]["error"]  # /server_info after the crash
    assert "KeyError: 'text'" in outcomes["rejected-0.4.6.post5"]["error"]  # the SSE error has no text


def test_refused_requests_counted_as_completed_are_not_imported(fixtures: Path, manifest: dict[str, Any]) -> None:
    """The server refuses each streamed request as SGLang 0.5.23 does (200, an SSE error event):
    the 0.5.23 client exits 0 and writes a record claiming every request completed, with TTFT 0
    and the requested output length.  The importer refuses that line and names why."""
    assert manifest["all_failed"]["rejected-0.5.23"]["ok"] is True
    data = (fixtures / "all-failed-rejected-0.5.23.jsonl").read_bytes()
    record = json.loads(data)
    assert record["completed"] > 0 and record["mean_ttft_ms"] == 0 and record["total_output_tokens_retokenized"] == 0
    preview = preview_bytes(data)
    assert [(p.line, p.code) for p in preview.problems] == [(1, "refused_as_completed"), (0, "no_records")]
    assert not preview.importable


def test_a_file_with_no_records_and_a_garbage_line() -> None:
    preview = preview_bytes(b"Traceback (most recent call last):\n")
    assert [(p.line, p.code) for p in preview.problems] == [(1, "not_json"), (0, "not_jsonl")]
    assert not preview.importable and preview.runs == ()
    assert [p.code for p in preview_bytes(b"").problems] == ["empty"]


def test_the_rust_clients_record_with_every_request_failed(fixtures: Path, manifest: dict[str, Any]) -> None:
    """The Rust client exits 0 and writes a record with completed 0: refused, others still import."""
    assert manifest["all_failed"]["rejected-0.5.23-rust"]["ok"] is True
    failed = (fixtures / "all-failed-rejected-0.5.23-rust.jsonl").read_bytes()
    assert json.loads(failed)["completed"] == 0
    good = (fixtures / "sglang-0.5.23-rust.jsonl").read_bytes()
    preview = preview_bytes(good + failed)
    assert [(p.line, p.code) for p in preview.problems] == [(3, "all_failed")]
    assert [p.line for p in preview.points] == [1, 2]


# -- duplicates and the second pass ------------------------------------------------------------


def test_the_same_content_has_the_same_hash(fixtures: Path) -> None:
    data = (fixtures / "sglang-0.5.23.jsonl").read_bytes()
    first, again = preview_import(fixtures / "sglang-0.5.23.jsonl"), preview_bytes(data, "renamed.jsonl")
    assert first.sha256 == again.sha256 and first.size_bytes == len(data)
    assert preview_bytes(data + b"\n").sha256 != first.sha256


def test_rows_carry_the_raw_records_in_file_order(fixtures: Path) -> None:
    path = fixtures / "sglang-0.5.23-details.jsonl"
    preview = preview_import(path)
    [row] = list(iter_point_rows(path, preview))
    assert row.raw == json_safe(records(path)[0]) and len(row.raw["itls"]) == prompts_for(2)
    assert row.metrics == preview.points[0].metrics and row.run_index == 0

    lines = (fixtures / "sglang-0.5.23.jsonl").read_bytes()
    preview = preview_bytes(b"garbage\n" + lines)
    rows = list(iter_point_rows(io.BytesIO(b"garbage\n" + lines), preview))
    assert [(r.line, r.run_index, r.conditions["concurrency"]) for r in rows] == [
        (2, 0, 1), (3, 0, 2), (4, 0, 4), (5, 1, 1), (6, 1, 2)]


def test_a_changed_file_is_refused_before_any_row(fixtures: Path) -> None:
    data = (fixtures / "sglang-0.5.23.jsonl").read_bytes()
    preview = preview_bytes(data)
    with pytest.raises(FileChanged):
        next(iter_point_rows(io.BytesIO(data.replace(b"sglang", b"sglanG", 1)), preview))


# -- the 50 MB file ----------------------------------------------------------------------------


def _big_record_line(fixtures: Path, target_bytes: int) -> bytes:
    """The real --output-details record, its per-request arrays repeated to ``target_bytes``."""
    [record] = records(fixtures / "sglang-0.5.23-details.jsonl")
    arrays = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors")
    factor = max(1, target_bytes // len(json.dumps({key: record[key] for key in arrays})))
    for key in arrays:
        record[key] = record[key] * factor
    return json.dumps(record).encode() + b"\n"


def _write_big_file(path: Path, line: bytes, size: int) -> int:
    count = 0
    with path.open("wb") as out:
        while count * len(line) < size:
            out.write(line)
            count += 1
    return count


def _reset_peak_rss() -> bool:
    """Linux: writing 5 to clear_refs resets VmHWM, so the next peak is this step's own."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


@pytest.fixture
def big_file(fixtures: Path, tmp_path: Path) -> Iterator[tuple[Path, int, int]]:
    line = _big_record_line(fixtures, 2 * 1024 * 1024)  # a 2 MB record: requests × tokens of a long sweep
    path = tmp_path / "big.jsonl"
    count = _write_big_file(path, line, 50 * 1024 * 1024)
    yield path, count, len(line)
    path.unlink()


@pytest.mark.slow
def test_a_50_mb_file_imports_in_bounded_memory(big_file: tuple[Path, int, int]) -> None:
    path, count, line_size = big_file
    size = path.stat().st_size
    assert size >= 50 * 1024 * 1024

    started = time.perf_counter()
    preview = preview_import(path)
    rows = sum(1 for _ in iter_point_rows(path, preview))
    seconds = time.perf_counter() - started
    assert len(preview.points) == rows == count and preview.problems == ()

    baseline, reset = _rss_kib("VmRSS"), _reset_peak_rss()
    tracemalloc.start()
    try:
        preview = preview_import(path)
        for row in iter_point_rows(path, preview):
            del row  # the lead's transaction writes each row and lets it go
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    rss_growth_kib = _rss_kib("VmHWM") - baseline if reset else None
    print(f"\n50 MB import: {size / 2**20:.1f} MiB, {count} records of {line_size / 2**20:.2f} MiB; "
          f"preview + rows {seconds:.2f} s; Python peak {peak / 2**20:.1f} MiB (tracemalloc); "
          f"peak RSS growth {rss_growth_kib / 1024 if rss_growth_kib is not None else float('nan'):.1f} MiB; "
          f"pid {os.getpid()}")
    # Bounded: a few times one line (parse + json_safe copy), never the file's 50 MB.
    assert peak < 12 * line_size < size / 2


def test_a_long_line_is_read_without_its_arrays_and_gives_the_same_point(fixtures: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Above SLIM_ABOVE_BYTES a line is walked, not json.loads-ed (domain/importer/slim.py): the
    point (metrics, conditions, requests sent) is the one a full parse gives; the raw record
    lacks only the long arrays, whose element counts it keeps."""
    import domain.importer.bench_jsonl as bench_jsonl
    import domain.importer.slim as slim

    path = fixtures / "sglang-0.5.23-details.jsonl"
    full = preview_import(path)
    monkeypatch.setattr(bench_jsonl, "SLIM_ABOVE_BYTES", 0)
    monkeypatch.setattr(slim, "KEEP_VALUE_BYTES", 64)
    walked = preview_import(path)
    assert [(p.metrics, p.conditions, p.unknown, p.record_format) for p in walked.points] == [
        (p.metrics, p.conditions, p.unknown, p.record_format) for p in full.points]
    [row] = list(iter_point_rows(path, walked))
    [record] = records(path)
    omitted = row.raw.pop(slim.OMITTED_KEY)
    assert omitted == {key: len(record[key]) for key in omitted} and "itls" in omitted
    assert row.raw == json_safe({k: v for k, v in record.items() if k not in omitted})


@pytest.mark.parametrize("text", ['{"a": [1, "x", {"b": "]"}], "c": 1', '{"a": [[1], [2', '{"a": "cut'])
def test_a_long_line_cut_short_reads_as_truncated(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import domain.importer.bench_jsonl as bench_jsonl

    monkeypatch.setattr(bench_jsonl, "SLIM_ABOVE_BYTES", 0)
    assert [p.code for p in preview_bytes(text.encode()).problems][:1] == ["truncated"]
    assert [p.code for p in preview_bytes(b"garbage" + text.encode()).problems][:1] == ["not_json"]


def test_files_that_are_not_json_lines_say_what_they_are(fixtures: Path) -> None:
    """A JSON array, a pretty-printed object, text: the file's shape and what is expected, not
    per-line noise and not "every request failed"."""
    [record] = records(fixtures / "sglang-0.4.6.post5-details.jsonl")
    shapes = {
        "json_array": json.dumps([record]).encode(),
        "json_document": json.dumps(record, indent=2).encode(),
        "not_jsonl": b"<html><body>502 Bad Gateway</body></html>\n",
        "empty": b"\n\n",
    }
    for code, data in shapes.items():
        preview = preview_bytes(data)
        assert not preview.importable and preview.problems[-1].code == code, (code, preview.problems)
        for lang in LANGUAGES:
            assert "request" not in preview.problems[-1].text(lang) or code == "empty"
    assert [p.code for p in preview_bytes(shapes["json_array"]).problems] == ["json_array"]  # lines left out
    assert preview_bytes(shapes["json_array"]).problems[0].text("en").startswith("This file is one JSON array")


# -- AIPerf ------------------------------------------------------------------------------------


def _aiperf_file(fixtures: Path, concurrency: int, ext: str) -> Path:
    return fixtures / "aiperf" / f"concurrency_{concurrency}" / f"profile_export_aiperf.{ext}"


AIPERF_COLUMNS = {
    "duration_s": ("benchmark_duration", "avg"), "request_throughput": ("request_throughput", "avg"),
    "input_throughput": ("input_token_throughput", "avg"), "output_throughput": ("output_token_throughput", "avg"),
    "total_throughput": ("total_token_throughput", "avg"), "achieved_concurrency": ("effective_concurrency", "avg"),
    **{f"{name}_{stat}_ms": (tag, key)
       for name, tag in {"ttft": "time_to_first_token", "tpot": "inter_token_latency",
                         "itl": "inter_chunk_latency", "e2e": "request_latency"}.items()
       for stat, key in {"mean": "avg", "median": "p50", "p90": "p90", "p95": "p95", "p99": "p99"}.items()},
}


@pytest.mark.parametrize("concurrency", AIPERF_CONCURRENCY)
def test_aiperf_json_maps_onto_the_same_columns(fixtures: Path, concurrency: int) -> None:
    path = _aiperf_file(fixtures, concurrency, "json")
    document = json.loads(path.read_text(encoding="utf-8"))
    assert document["aiperf_version"] == "0.13.0"
    preview = preview_import(path)
    assert preview.source_kind == "aiperf_json" and preview.problems == ()
    [point] = preview.points
    for column, (tag, key) in AIPERF_COLUMNS.items():
        assert point.metrics[column] == document[tag][key], column
    assert point.metrics["completed"] == document["request_count"]["avg"] == prompts_for(max(AIPERF_CONCURRENCY))
    assert point.conditions["concurrency"] == concurrency
    assert point.conditions["num_prompts"] == point.metrics["requested"] == prompts_for(max(AIPERF_CONCURRENCY))
    assert (point.conditions["input_len"], point.conditions["output_len"], point.conditions["warmup"]) == (ISL, OSL, 1)
    assert point.conditions["ignore_eos"] is True and point.conditions["seed"] == 42
    assert point.file_facts["model"] == "Qwen/Qwen3-30B-A3B"
    assert {"tokenize_prompt", "flush_cache", "dataset_path"} <= set(point.unknown)
    [row] = list(iter_point_rows(path, preview))
    assert row.raw == json_safe(document)


@pytest.mark.parametrize("concurrency", AIPERF_CONCURRENCY)
def test_aiperf_csv_gives_its_two_decimal_figures_and_no_conditions(fixtures: Path, concurrency: int) -> None:
    document = json.loads(_aiperf_file(fixtures, concurrency, "json").read_text(encoding="utf-8"))
    preview = preview_import(_aiperf_file(fixtures, concurrency, "csv"))
    assert preview.source_kind == "aiperf_csv" and preview.problems == ()
    [point] = preview.points
    for column, (tag, key) in AIPERF_COLUMNS.items():
        assert point.metrics[column] == float(f"{document[tag][key]:.2f}"), column
    assert point.metrics["requested"] is None and point.conditions["concurrency"] is None
    assert "concurrency" in point.unknown and "input_len" in point.unknown


def test_aiperf_files_of_one_sweep_group_into_one_run(fixtures: Path) -> None:
    points = [preview_import(_aiperf_file(fixtures, c, "json")).points[0] for c in AIPERF_CONCURRENCY]
    [run] = group_runs(points)
    assert run.concurrencies == AIPERF_CONCURRENCY


# -- what the user states --------------------------------------------------------------------

LAUNCH = ("python -m sglang.launch_server --model-path Qwen/Qwen3-30B-A3B \\\n"
          "  --tp-size 2 --host 10.1.2.3 --port 30000  # as run on the team's box\n")


def test_stated_conditions_are_all_optional() -> None:
    stated = ImportConditions()
    assert stated.server_args() is None and stated.model_dump(exclude_none=True) == {}


def test_a_pasted_command_is_parsed_and_checked_against_the_stated_version() -> None:
    stated = ImportConditions(model="Qwen/Qwen3-30B-A3B", gpu_type="H200", gpu_count=2, engine="sglang",
                              engine_version="0.5.23", server_command=LAUNCH, dataset="random-ids", warmup=2)
    assert stated.server_args() == {"model-path": "Qwen/Qwen3-30B-A3B", "tp-size": 2, "host": "10.1.2.3",
                                    "port": 30000}
    check = check_server_command(LAUNCH, "0.5.23")
    assert check.report is not None and check.report.ok  # launch policy (host, port) is not about history


def test_flag_errors_and_bad_text_are_refused() -> None:
    with pytest.raises(ValidationError, match="tp-size"):
        ImportConditions(engine="sglang", engine_version="0.5.23", server_command="--tp-size two")
    with pytest.raises(ValidationError, match=re.escape("0.4.6.post5")):  # a 0.5.x flag: wrong version or wrong command
        ImportConditions(engine="sglang", engine_version="0.4.6.post5", server_command="--attn-cp-size 2")
    with pytest.raises(ValidationError):
        ImportConditions(engine="sglang", engine_version="0.5.23", server_command="--tp-size 2 --model-path 'x")
    with pytest.raises(ValidationError):
        ImportConditions(engine="sglang", engine_version="latest")
    with pytest.raises(ValidationError):
        ImportConditions(gpu_count=0)


def test_a_version_without_a_schema_is_parsed_but_not_checked() -> None:
    check = check_server_command("--tp-size 4", "0.5.3")
    assert check.server_args == {"tp-size": 4} and check.report is None and check.checked_against is None


def test_file_facts_win_and_disagreements_are_listed(fixtures: Path) -> None:
    run = preview_import(fixtures / "sglang-0.5.23.jsonl").runs[0]
    stated = ImportConditions(model="Qwen/Qwen3-30B-A3B", gpu_type="H100", engine="sglang",
                              engine_version="0.5.23", server_command="--tensor-parallel-size 2", warmup=3)
    statement = run_statement(run, stated)
    value = {name: (stated.value, stated.provenance) for name, stated in statement.values.items()}
    assert value["engine"] == ("emulator", "file") and value["engine_version"] == ("0.5.23", "file")
    assert value["gpu_type"] == ("H200", "file") and value["gpu_count"] == (1, "file")  # the emulator says so
    assert value["warmup"] == (3, "user") and value["max_total_num_tokens"][1] == "file"
    assert value["model"] == ("Qwen/Qwen3-30B-A3B", "file")
    assert statement.conflicts["server_args"] == (run.server.server_args, {"tp-size": 2})  # alias → main name
    assert statement.conflicts["engine"] == ("emulator", "sglang") and statement.conflicts["gpu_type"][1] == "H100"
    assert "model" not in statement.conflicts and statement.unknown == ()


def test_runs_from_a_file_without_server_info_leave_the_launch_unknown(fixtures: Path) -> None:
    run = preview_import(fixtures / "sglang-0.4.6.post5.jsonl").runs[0]
    statement = run_statement(run, ImportConditions(gpu_count=8))
    assert set(statement.unknown) == {"model", "gpu_type", "engine", "engine_version", "server_args", "warmup",
                                      "max_total_num_tokens"}
    assert statement.values["dataset"].provenance == "file" and statement.values["gpu_count"].value == 8
