"""Fault suite, runner side (docs/fault-suite.md): each case with its expected state, processes
and data.  Real processes: the runner daemon (a subprocess, or a Runner in this process
where a seam must be patched), the emulator, the real bench_serving client, real DuckDB
files, a real tmpfs for the disk-full cases.  docs/fault-suite.md maps every case to its test.

Covered elsewhere and not repeated: kill -9 of the runner (tests/test_runner_e2e.py), warm
SIGTERM, OOM, startup timeout, crash mid-point, corrupt output, cancel while starting or
benchmarking (same file); claim races and kill -9 mid-transaction (tests/test_db_processes.py).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from db import Store
from db.queries import INSERT_AUDIT
from domain.flags.policy import DEFAULT_POLICY_PATH
from runner import server_process as engine_module
from runner import topology as topology_module
from runner.daemon import EXIT_DB_UNUSABLE, Runner
from runner.host import SIMULATED_GPU_USERS_ENV, disk_full
from tests.support.actors import operator
from tests.support.runner_harness import (
    MARK,
    assert_nothing_left,
    attempt_points,
    attempt_status,
    audit_rows,
    free_port,
    free_port_pair,
    leftovers,
    run_burst,
    runner_env,
    runner_row,
    runner_settings,
    small_plan,
    squat,
    start_runner,
    stop_outside_db_lock,
    wait_for,
)


def _pgids(store: Store, run_id: int) -> list[dict[str, object]]:
    return json.loads(store.attempts_of(run_id)[-1].pgids or "[]")


def _runner_log(env: dict[str, str]) -> str:
    logs = sorted(Path(env["BENCHDECK_WORK_DIR"]).parent.glob("runner-*.log"))
    return "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in logs)


# --- case 3 (cold): a second SIGTERM ---------------------------------------------------------------


@pytest.mark.sglang
@pytest.mark.slow
def test_double_sigterm_is_a_cold_stop_that_kills_the_group_at_once(store: Store, env: dict[str, str]) -> None:
    # One point takes far longer than the test waits (8 sequential requests of 1024 tokens).
    plan = small_plan(benchmark={"scenarios": [{"name": "long", "input_len": 64, "output_len": 1024}],
                                 "concurrency": [1, 2], "num_prompts": "8x", "warmup": "1x"})
    run_id, _ = store.submit_run(plan, submitted_by=operator("alice"))
    renv = runner_env(env)
    proc = start_runner(renv)  # serve-like
    wait_for(lambda: attempt_status(store, run_id) == "benchmarking", 90, "benchmarking")
    time.sleep(1.0)  # inside the first point
    proc.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    assert proc.poll() is None, "a warm stop waits for the point to finish"
    second = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert time.monotonic() - second < 10, "a cold stop must not wait for the point or the grace period"
    [attempt] = store.attempts_of(run_id)
    assert attempt.status == "cancelled" and "runner stopped after 0 point(s)" in attempt.message
    assert store.get_run(run_id).status == "queued"  # the run goes back to the queue
    assert store.points_of(run_id) == []  # the interrupted point left no row
    assert_nothing_left(renv[MARK], timeout=5)


# --- case 4: the server dies during start-up or warm-up ---------------------------------------------


def test_server_killed_during_startup_is_noticed_in_seconds(store: Store, env: dict[str, str]) -> None:
    """Emulated 'kill one TP rank': SIGKILL the server process while it loads."""
    run_id, _ = store.submit_run(small_plan(), submitted_by=operator("alice"))
    renv = runner_env(env, BENCHDECK_EMULATE_FAULT="never-ready", BENCHDECK_MAX_ATTEMPTS="1")
    proc = start_runner(renv, "--burst")
    wait_for(lambda: attempt_status(store, run_id) == "starting" and bool(_pgids(store, run_id)), 60, "a server")
    [server] = [g for g in _pgids(store, run_id) if g["role"] == "server"]
    log = Path(renv["BENCHDECK_WORK_DIR"]) / f"attempt-{store.attempts_of(run_id)[0].id}" / "server.log"
    wait_for(lambda: log.exists() and log.stat().st_size > 0, 30, "the server to log its loading")
    killed = time.monotonic()
    os.kill(int(str(server["pgid"])), signal.SIGKILL)
    wait_for(lambda: attempt_status(store, run_id) == "failed", 15, "the crash to be noticed")
    assert time.monotonic() - killed < 5
    assert proc.wait(timeout=30) == 0
    [attempt] = store.attempts_of(run_id)
    assert attempt.failure_kind == "server_crash" and "start-up" in attempt.message
    assert attempt.log_tail  # the log tail is kept with the attempt
    assert store.points_of(run_id) == []
    assert_nothing_left(renv[MARK])


def test_server_crash_during_its_own_warmup_is_a_server_crash(store: Store, env: dict[str, str]) -> None:
    run_id, _ = store.submit_run(small_plan(), submitted_by=operator("alice"))
    renv = runner_env(env, BENCHDECK_EMULATE_FAULT="crash-during-warmup", BENCHDECK_MAX_ATTEMPTS="1")
    assert run_burst(renv, timeout=60) == 0
    [attempt] = store.attempts_of(run_id)
    assert (attempt.status, attempt.failure_kind) == ("failed", "server_crash")
    assert "warmup" in attempt.log_tail
    assert store.get_run(run_id).status == "failed" and store.points_of(run_id) == []
    assert_nothing_left(renv[MARK])


@pytest.mark.sglang
def test_server_dying_in_the_bench_warmup_phase_stores_no_rows(store: Store, env: dict[str, str]) -> None:
    """Four warm-up requests before the first measured one; the server dies at the second."""
    plan = small_plan(benchmark={"scenarios": [{"name": "s", "input_len": 64, "output_len": 32}],
                                 "concurrency": [1], "num_prompts": 3, "warmup": 4})
    run_id, _ = store.submit_run(plan, submitted_by=operator("alice"))
    renv = runner_env(env, BENCHDECK_EMULATE_FAULT="crash-after-requests=1", BENCHDECK_MAX_ATTEMPTS="1")
    assert run_burst(renv) == 0
    [attempt] = store.attempts_of(run_id)
    assert (attempt.status, attempt.failure_kind) == ("failed", "server_crash")
    assert "crash after 1 requests" in attempt.log_tail
    assert store.points_of(run_id) == [] and store.telemetry_of(run_id) == []
    assert_nothing_left(renv[MARK])


# --- case 8: ports -----------------------------------------------------------------------------------


@pytest.mark.sglang
def test_a_squatter_in_the_port_range_is_skipped_and_the_launch_is_audited(
    store: Store, env: dict[str, str]
) -> None:
    first = free_port_pair()
    second = first + 1
    with contextlib.closing(squat(first)):
        plan = small_plan(server_args={"max-running-requests": 16, "served-model-name": "qwen3 (test)"},
                          benchmark={"scenarios": [{"name": "s", "input_len": 32, "output_len": 16}],
                                     "concurrency": [1], "num_prompts": 2, "warmup": 1})
        run_id, _ = store.submit_run(plan, submitted_by=operator("alice"))
        renv = runner_env(env, BENCHDECK_ENGINE_PORT_RANGE=json.dumps([first, second]))
        assert run_burst(renv) == 0
    assert store.get_run(run_id).status == "succeeded"
    [attempt] = store.attempts_of(run_id)
    argv = json.loads(attempt.server_argv)
    assert argv[argv.index("--port") + 1] == str(second)
    # The launch audit row: actor = the runner, the exact argv, the configuration hash.
    [launch] = audit_rows(store, "launch")
    assert launch["actor"] == renv["BENCHDECK_RUNNER_ID"] and launch["run_id"] == run_id
    assert launch["details"]["argv"] == argv
    assert "qwen3 (test)" in argv  # one argv element: nothing is split or parsed by a shell
    assert launch["details"]["config_hash"] == store.get_run(run_id).configuration_id
    assert launch["details"]["attempt_id"] == attempt.id
    policy_sha = hashlib.sha256(DEFAULT_POLICY_PATH.read_bytes()).hexdigest()
    assert launch["details"]["policy_sha256"] == policy_sha
    assert_nothing_left(renv[MARK])


def test_every_port_of_the_range_taken_keeps_the_run_queued(store: Store, env: dict[str, str]) -> None:
    port = free_port()
    with contextlib.closing(squat(port)):
        run_id, _ = store.submit_run(small_plan(), submitted_by=operator("alice"))
        renv = runner_env(env, BENCHDECK_ENGINE_PORT_RANGE=json.dumps([port, port]))
        assert run_burst(renv, timeout=60) == 0
    assert store.get_run(run_id).status == "queued" and store.attempts_of(run_id) == []
    row = runner_row(store, renv["BENCHDECK_RUNNER_ID"])
    assert row.healthy is False and f"no free port in {port}-{port}" in row.unhealthy_reason
    assert_nothing_left(renv[MARK])


class _StaleHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'{"stale": true}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stale_server() -> Iterator[int]:
    """An old server still answering 200 on /health (SGLang CI once passed against one)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), _StaleHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def marked(monkeypatch: pytest.MonkeyPatch) -> str:
    """A mark that children of an in-process Runner inherit, to find leftovers."""
    mark = os.urandom(8).hex()
    monkeypatch.setenv(MARK, mark)
    return mark


@pytest.mark.parametrize("race", [False, True], ids=["taken-at-launch", "taken-after-the-check"])
def test_a_stale_server_on_the_chosen_port_is_refused(
    tmp_path: Path, stale_server: int, marked: str, monkeypatch: pytest.MonkeyPatch, race: bool
) -> None:
    """The pick skips taken ports, so the stale server is injected at the pick (the window
    between pick and launch).  taken-at-launch: the launch's own port check refuses before
    any process starts.  taken-after-the-check: the stale server binds after that check too,
    our server cannot bind and the stale one answers /health: the listening socket is not
    ours, so the attempt is refused before any benchmark."""
    monkeypatch.setattr(topology_module, "pick_free_port", lambda *a, **k: stale_server)
    if race:
        monkeypatch.setattr(engine_module, "port_is_free", lambda *a, **k: True)
    settings = runner_settings(tmp_path / "db.duckdb", tmp_path / "runs")
    store = Store(settings.db)
    runner = Runner(settings, store)
    runner.start()
    run_id, _ = store.submit_run(small_plan(), submitted_by=operator("alice"))
    assert runner.run_once() is True
    [attempt] = store.attempts_of(run_id)
    assert (attempt.status, attempt.failure_kind) == ("failed", "host_unhealthy")
    assert str(stale_server) in attempt.message
    assert ("not from the launched server" if race else "is taken") in attempt.message
    assert store.get_run(run_id).status == "queued"  # retried later, elsewhere or once the port is free
    assert store.points_of(run_id) == []
    row = runner_row(store, settings.runner_id)
    assert row.healthy is False and str(stale_server) in row.unhealthy_reason
    assert runner.run_once() is False  # claims nothing while the stale server holds the port
    assert_nothing_left(marked)


# --- case 9: a foreign process on the GPU (simulated: no GPU here) -------------------------------------


@pytest.mark.parametrize("user", [
    {"pid": 4242, "used_gb": 20.0},  # a process NVML can name
    {"pid": 0, "used_gb": 30.0},  # memory in use, no name (another container)
], ids=["named", "unnamed-memory"])
def test_a_foreign_gpu_process_keeps_only_the_runs_on_its_gpu_queued_and_says_why(
    store: Store, env: dict[str, str], tmp_path: Path, user: dict[str, object]
) -> None:
    gpu_state = tmp_path / "simulated-gpu-users.json"
    gpu_state.write_text(json.dumps([{"gpu": 7, **user}]), encoding="utf-8")
    # Plans the runner refuses on its own (bad_args): claimed, they end without starting anything.
    renv = runner_env(env, BENCHDECK_RUNNER_GPU_COUNT="8", **{SIMULATED_GPU_USERS_ENV: str(gpu_state)})
    on_gpu_0, _ = store.submit_run(small_plan(server_args={"foo": 1}), submitted_by=operator("alice"))
    assert run_burst(renv, timeout=60) == 0  # a teammate's process on GPU 7 does not stop a TP1 run on GPU 0
    assert [a.failure_kind for a in store.attempts_of(on_gpu_0)] == ["bad_args"]
    gpu_state.write_text(json.dumps([{"gpu": 0, **user}]), encoding="utf-8")
    waits, _ = store.submit_run(small_plan(server_args={"foo": 1}), submitted_by=operator("alice"))
    assert run_burst(renv, timeout=60) == 0
    assert store.get_run(waits).status == "queued" and store.attempts_of(waits) == []
    assert runner_row(store, renv["BENCHDECK_RUNNER_ID"]).healthy is True  # its other GPUs still take runs
    status = subprocess.run([sys.executable, "-m", "runner", "status"], env=renv, capture_output=True, text=True,
                            timeout=120, check=True).stdout
    assert "GPU 0, which this run would use, is held by another process: foreign process on the GPUs: GPU0 " \
        "pid " in status and "SIMULATED" in status
    gpu_state.unlink()  # the foreign process goes away: the run is claimed
    assert run_burst(renv, timeout=60) == 0
    assert [a.failure_kind for a in store.attempts_of(waits)] == ["bad_args"]
    assert_nothing_left(renv[MARK])


def test_a_foreign_gpu_process_appearing_after_the_claim_stops_the_launch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gpu_state = tmp_path / "simulated-gpu-users.json"
    monkeypatch.setenv(SIMULATED_GPU_USERS_ENV, str(gpu_state))
    settings = runner_settings(tmp_path / "db.duckdb", tmp_path / "runs")
    store = Store(settings.db)
    runner = Runner(settings, store)
    runner.start()
    run_id, _ = store.submit_run(small_plan(), submitted_by=operator("alice"))
    claim = store.claim_next(runner.caps, lease_s=settings.lease_s)
    assert claim is not None
    gpu_state.write_text(json.dumps([{"gpu": 0, "pid": 4242, "used_gb": 20.0}]), encoding="utf-8")
    runner.execute(claim)
    [attempt] = store.attempts_of(run_id)
    assert (attempt.status, attempt.failure_kind) == ("failed", "host_unhealthy")
    assert store.get_run(run_id).status == "queued" and audit_rows(store, "launch") == []
    assert runner.healthy is False and runner_row(store, settings.runner_id).healthy is False


# --- case 12: SIGSTOP past the lease, then SIGCONT ---------------------------------------------------------


@pytest.mark.sglang
@pytest.mark.slow
def test_a_runner_stopped_past_its_lease_is_fenced_when_it_resumes(store: Store, env: dict[str, str]) -> None:
    # Long enough that the stop lands mid-run on a loaded host (with 128 tokens the run once
    # finished before the stop did: one attempt, nothing to fence).
    plan = small_plan(benchmark={"scenarios": [{"name": "s", "input_len": 64, "output_len": 384}],
                                 "concurrency": [1, 2], "num_prompts": "4x", "warmup": "1x"})
    run_id, _ = store.submit_run(plan, submitted_by=operator("alice"))
    first = runner_env(env)
    proc = start_runner(first, "--burst")
    wait_for(lambda: attempt_status(store, run_id) == "benchmarking", 90, "benchmarking")
    stop_outside_db_lock(proc.pid, Path(env["BENCHDECK_DB"]))
    try:
        stopped_attempt = store.attempts_of(run_id)[0].id
        rows_before = len(attempt_points(store, run_id, stopped_attempt))
        second = runner_env(env)
        second[MARK] = first[MARK]
        # The second runner reaps the expired lease (killing the first one's server and client)
        # and runs attempt 2 to the end.
        wait_for(lambda: run_burst(second, timeout=120) == 0 and store.get_run(run_id).status == "succeeded",
                 150, "the takeover")
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    assert proc.wait(timeout=60) == 0
    first_attempt, second_attempt = store.attempts_of(run_id)
    assert (first_attempt.status, first_attempt.failure_kind) == ("failed", "runner_lost")
    assert first_attempt.runner_id == first["BENCHDECK_RUNNER_ID"]
    assert second_attempt.status == "succeeded" and second_attempt.runner_id == second["BENCHDECK_RUNNER_ID"]
    # Fenced: the resumed runner wrote no row after its lease ran out, and did not rewrite the ending.
    assert len(attempt_points(store, run_id, stopped_attempt)) == rows_before
    assert len(attempt_points(store, run_id, second_attempt.id)) == 2
    assert store.get_run(run_id).status == "succeeded"
    assert "lease" in first_attempt.message
    assert_nothing_left(first[MARK])


# --- case 13: disk full (tmpfs) ----------------------------------------------------------------------------


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "runs-on-tmpfs"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount_point)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _fill(directory: Path) -> Path:
    """Fill the filesystem under ``directory`` to the last byte; return the filler file."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for chunk in (1 << 20, 4096, 1):
            try:
                while os.write(fd, b"\0" * chunk) == chunk:
                    pass
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
    assert disk_full(directory) is not None
    return filler


@pytest.mark.sglang
@pytest.mark.slow
def test_disk_full_under_the_work_dir_fails_the_attempt_as_disk_full_and_stops_claims(
    store: Store, env: dict[str, str], small_tmpfs: Path
) -> None:
    plan = small_plan(benchmark={"scenarios": [{"name": "s", "input_len": 64, "output_len": 64}],
                                 "concurrency": [1, 2, 4], "num_prompts": "3x", "warmup": "1x"})
    run_id, _ = store.submit_run(plan, submitted_by=operator("alice"))
    waiting, _ = store.submit_run(small_plan(name="waiting"), submitted_by=operator("alice"))
    # The runner's own log stays outside the tmpfs.  The point timeout bounds a known hang:
    # the server-log pump thread (runner/server_log.py) dies on ENOSPC and the server's
    # requests then stall on the broken pipe (reported to its owner).
    renv = runner_env(env, BENCHDECK_WORK_DIR=str(small_tmpfs), BENCHDECK_POINT_TIMEOUT_S="15")
    proc = start_runner(renv, "--burst")
    wait_for(lambda: len(store.points_of(run_id)) >= 1, 120, "a first committed point")
    committed = store.points_of(run_id)
    filler = _fill(small_tmpfs)
    try:
        try:
            assert proc.wait(timeout=120) == 0
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        [attempt] = store.attempts_of(run_id)
        assert (attempt.status, attempt.failure_kind) == ("failed", "disk_full"), attempt.message
        assert store.get_run(run_id).status == "queued"  # retryable, on a host with space
        # The runner stops taking jobs: the other run was not claimed, the host is flagged.
        assert store.get_run(waiting).status == "queued" and store.attempts_of(waiting) == []
        row = runner_row(store, renv["BENCHDECK_RUNNER_ID"])
        assert row.healthy is False and "disk full" in row.unhealthy_reason
        # Earlier committed rows survive (each read reopens the file), complete.
        after = store.points_of(run_id)
        assert [p.id for p in after] == [p.id for p in committed][: len(after)] and len(after) >= 1
        assert all(p.completed == p.requested for p in after)
        assert_nothing_left(renv[MARK])
    finally:
        filler.unlink()
    assert disk_full(small_tmpfs) is None  # space is back: the next pre-flight passes


def test_disk_full_under_the_database_refuses_the_write_and_keeps_committed_rows(small_tmpfs: Path) -> None:
    db = small_tmpfs / "bench.duckdb"
    store = Store(db, lock_timeout_s=10)
    store.migrate()
    for i in range(20):
        store.audit("runner-x", "kept", None, {"i": i})
    filler = _fill(small_tmpfs)
    refused = 0
    try:
        for i in range(50):  # enough to need new blocks for the WAL or a checkpoint
            try:
                store.audit("runner-x", "lost", None, {"i": i, "pad": "x" * 200_000})
            except Exception as exc:  # DuckDB's own error: it must be raised, never swallowed
                refused += 1
                assert "space" in str(exc).lower() or "write" in str(exc).lower(), exc
    finally:
        filler.unlink()
    assert refused > 0, "a write on a full disk must fail loudly"
    reopened = Store(db, lock_timeout_s=10)
    assert len(audit_rows(reopened, "kept")) == 20  # every committed row survives the reopen
    reopened.audit("runner-x", "after", None, {})  # and the file is usable once space is back
    assert len(audit_rows(reopened, "after")) == 1


# --- cases 2 and 14: a WAL left behind, torn, or not replayable ------------------------------------------------

_DIE_INSIDE_AN_ACCESS = """
import duckdb, os, signal, sys, datetime
con = duckdb.connect(sys.argv[1])
con.execute("PRAGMA disable_checkpoint_on_shutdown")
con.execute("SET wal_autocheckpoint='1GB'")
for i in range(int(sys.argv[2])):
    con.execute(sys.argv[3], [datetime.datetime(2024, 1, 1), "crashed-writer", "committed", None, str(i)])
os.kill(os.getpid(), signal.SIGKILL)
"""


def _leave_a_wal(db: Path, rows: int) -> Path:
    subprocess.run([sys.executable, "-c", _DIE_INSIDE_AN_ACCESS, str(db), str(rows), INSERT_AUDIT], check=False)
    wal = db.with_name(db.name + ".wal")
    assert wal.exists() and wal.stat().st_size > 0
    return wal


def _kept_copies(db: Path) -> list[Path]:
    return sorted(db.parent.glob(db.name + ".wal.kept-*"))


def test_committed_rows_in_a_wal_left_by_a_kill_9_survive_the_runner_start(
    store: Store, db_path: Path, env: dict[str, str]
) -> None:
    _leave_a_wal(db_path, 30)
    renv = runner_env(env)
    assert run_burst(renv, timeout=60) == 0
    assert len(audit_rows(store, "committed")) == 30
    [kept] = _kept_copies(db_path)
    [recovered] = audit_rows(store, "wal_recovered")
    assert recovered["details"]["kept_copy"] == str(kept)


def test_a_torn_wal_is_kept_before_the_replay_and_the_recovery_is_audited(
    store: Store, db_path: Path, env: dict[str, str]
) -> None:
    """DuckDB replays a damaged WAL up to the damage without an error (2.0.1: a WAL cut in
    half lost the later committed rows).  The runner cannot stop that; it keeps the WAL as
    it was and says so, so the loss is neither silent nor final."""
    wal = _leave_a_wal(db_path, 50)
    os.truncate(wal, wal.stat().st_size // 2)
    torn = wal.read_bytes()
    renv = runner_env(env)
    assert run_burst(renv, timeout=60) == 0
    [kept] = _kept_copies(db_path)
    assert kept.read_bytes() == torn
    [recovered] = audit_rows(store, "wal_recovered")
    assert recovered["details"]["kept_copy"] == str(kept)
    assert "A copy is kept at" in _runner_log(renv)
    assert len(audit_rows(store, "committed")) <= 50


def test_a_wal_that_does_not_replay_stops_the_runner_with_a_clear_message(
    db_path: Path, env: dict[str, str], tmp_path: Path
) -> None:
    other = tmp_path / "other.duckdb"
    Store(other).migrate()
    foreign_wal = _leave_a_wal(other, 5)
    Store(db_path).migrate()
    wal = db_path.with_name(db_path.name + ".wal")
    shutil.copy(foreign_wal, wal)  # a WAL that belongs to another database file
    digest = hashlib.sha256(wal.read_bytes()).hexdigest()
    renv = runner_env(env)
    assert run_burst(renv, timeout=60) == EXIT_DB_UNUSABLE
    log = _runner_log(renv)
    assert "cannot open the database" in log and str(wal) in log and "left as it is" in log
    assert wal.exists() and hashlib.sha256(wal.read_bytes()).hexdigest() == digest  # never deleted
    assert leftovers(renv[MARK]) == []


# --- the flag policy file changing between claims ------------------------------------------------------------


def test_a_policy_change_between_claims_is_audited_with_both_hashes(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    shutil.copy(DEFAULT_POLICY_PATH, policy)
    settings = runner_settings(tmp_path / "db.duckdb", tmp_path / "runs", flag_policy_file=policy)
    store = Store(settings.db)
    runner = Runner(settings, store)
    runner.start()
    # Plans the runner ends on its own (bad_args) so that nothing is launched.
    store.submit_run(small_plan(name="one", server_args={"foo": 1}), submitted_by=operator("alice"))
    assert runner.run_once() is True
    assert audit_rows(store, "policy_changed") == []  # unchanged since start
    old = hashlib.sha256(policy.read_bytes()).hexdigest()
    text = policy.read_text(encoding="utf-8").replace(
        "\nforbidden:\n", "\nforbidden:\n  - {flag: enable-torch-compile, category: destructive}\n", 1)
    policy.write_text(text, encoding="utf-8")
    new = hashlib.sha256(policy.read_bytes()).hexdigest()
    two, _ = store.submit_run(small_plan(name="two", server_args={"enable-torch-compile": True}),
                              submitted_by=operator("alice"))
    assert runner.run_once() is True
    [changed] = audit_rows(store, "policy_changed")
    assert changed["actor"] == settings.runner_id and changed["run_id"] == two
    assert changed["details"] == {"path": str(policy), "old_sha256": old, "new_sha256": new}
    # The new policy is the one applied to that run.
    [attempt] = store.attempts_of(two)
    assert attempt.failure_kind == "bad_args" and "--enable-torch-compile" in attempt.message
    store.submit_run(small_plan(name="three", server_args={"foo": 1}), submitted_by=operator("alice"))
    assert runner.run_once() is True
    assert len(audit_rows(store, "policy_changed")) == 1  # once per change


def test_an_unreadable_policy_file_flags_the_host_and_launches_nothing(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    shutil.copy(DEFAULT_POLICY_PATH, policy)
    settings = runner_settings(tmp_path / "db.duckdb", tmp_path / "runs", flag_policy_file=policy)
    store = Store(settings.db)
    runner = Runner(settings, store)
    runner.start()
    policy.write_text("categories: [not, a, mapping\n", encoding="utf-8")
    run_id, _ = store.submit_run(small_plan(), submitted_by=operator("alice"))
    assert runner.run_once() is False
    assert store.get_run(run_id).status == "queued" and store.attempts_of(run_id) == []
    row = runner_row(store, settings.runner_id)
    assert row.healthy is False and "flag policy unreadable" in row.unhealthy_reason


# --- case 7: the scheduler stalls while /health still answers 200 ---------------------------------------


@pytest.mark.sglang
def test_a_stalled_scheduler_behind_a_healthy_health_fails_the_point_as_server_crash_within_the_liveness_bound(
    store: Store, env: dict[str, str]
) -> None:
    """The emulator's stall fault stops its scheduler and keeps /health at 200; its
    /health_generate then answers 503 after SGLANG_HEALTH_CHECK_TIMEOUT.  The liveness probe
    (runner/liveness.py) ends the point after 3 failures spanning 2 s, far inside the point
    timeout, as server_crash; the bench client and the server group are killed, no rows."""
    run_id, _ = store.submit_run(small_plan(), submitted_by=operator("alice"))
    renv = runner_env(env, BENCHDECK_EMULATE_FAULT="stall-after-requests=2", BENCHDECK_POINT_TIMEOUT_S="120",
                      BENCHDECK_MAX_ATTEMPTS="1", SGLANG_HEALTH_CHECK_TIMEOUT="1",
                      BENCHDECK_LIVENESS_INTERVAL_S="0.5", BENCHDECK_LIVENESS_FAILURES="3",
                      BENCHDECK_LIVENESS_WINDOW_S="2", BENCHDECK_LIVENESS_PROBE_TIMEOUT_S="5")
    proc = start_runner(renv, "--burst")
    try:
        wait_for(lambda: attempt_status(store, run_id) == "benchmarking", 90, "benchmarking")
        benchmarking = time.monotonic()
        wait_for(lambda: attempt_status(store, run_id) == "failed", 60, "the attempt failing")
        # Bound: 3 x (1 s check + 0.5 s interval) + the /health look + teardown (5 s grace for
        # the stalled server, which never drains), against 120 s for the point timeout alone.
        assert time.monotonic() - benchmarking < 30  # about 11 s measured
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    [attempt] = store.attempts_of(run_id)
    assert (attempt.status, attempt.failure_kind) == ("failed", "server_crash")
    assert "scheduler not responding: /health_generate failed 3 times over" in attempt.message
    assert "while /health answers 200; last: HTTP 503 (at short/c1/r0)" in attempt.message
    assert store.points_of(run_id) == []
    assert_nothing_left(renv[MARK])
