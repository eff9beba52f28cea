"""Operations: backup/restore of the DuckDB file, engine server log rotation, systemd units.

Real DuckDB files, real writer and child processes, the real CLI."""

from __future__ import annotations

import configparser
import json
import shlex
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from db import RunnerCapabilities, Store
from db.backup import BackupError, backup, restore, verify
from db.connection import connect
from domain.core.access import Actor, Role
from domain.core.states import FailureKind
from runner import server_process
from runner.process import pick_free_port
from runner.server_log import LogRotation, log_files, tail
from tests.conftest import APP_PYTHON, ROOT
from tests.plans import minimal_plan

# --- backup and restore ---------------------------------------------------------------

ALICE = Actor("alice", Role.ADMIN, via="cli")


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([APP_PYTHON, "-m", "runner", *args], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def _audit_ids(path: Path) -> list[int]:
    """Read under the Store's lock: a writer may be live on ``path``."""
    with connect(path, lock_timeout_s=30, read_only=True) as con:
        return [row[0] for row in con.execute("SELECT id FROM audit_log ORDER BY id").fetchall()]


def _wait_for(predicate: Callable[[], object], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


@pytest.mark.slow
def test_backup_while_a_writer_inserts_has_every_row_committed_before_it(
    store: Store, db_path: Path, env: dict[str, str], tmp_path: Path
) -> None:
    writes = 600  # about 30 s of writes: the CLI backup (interpreter start included) ends inside them,
    # also on a loaded 2-core CI host
    writer = subprocess.Popen([APP_PYTHON, "-m", "tests.support.db_worker", "write", str(db_path), str(writes)],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: len(_audit_ids(db_path)) >= 30)
        committed_before = set(_audit_ids(db_path))
        dest = tmp_path / "backups" / "bench-copy.duckdb"
        result = _cli(env, "backup", str(dest))
        still_writing = writer.poll() is None
    finally:
        out, err = writer.communicate(timeout=120)
    assert result.returncode == 0, result.stderr
    assert still_writing, "the writer finished before the backup did: the test proved nothing"
    assert writer.returncode == 0, err
    assert len(json.loads(out)) == writes  # every write of the live writer succeeded despite the backup
    ids = _audit_ids(dest)
    assert committed_before <= set(ids)
    assert ids == list(range(1, len(ids) + 1))  # a prefix of the commits: no gap, no half transaction
    assert len(ids) < writes
    assert f"audit_log {len(ids):>10}".split() == next(
        line.split() for line in result.stdout.splitlines() if line.strip().startswith("audit_log"))
    assert not list(dest.parent.glob(".*tmp*"))  # the temp file was renamed into place


def test_backup_refuses_an_existing_destination_unless_forced(store: Store, env: dict[str, str],
                                                              tmp_path: Path) -> None:
    dest = tmp_path / "exists.duckdb"
    dest.write_bytes(b"keep me")
    result = _cli(env, "backup", str(dest))
    assert result.returncode == 1
    assert "--force" in result.stderr and "Traceback" not in result.stderr
    assert dest.read_bytes() == b"keep me"
    forced = _cli(env, "backup", "--force", str(dest))
    assert forced.returncode == 0, forced.stderr
    assert verify(dest)["schema_migrations"] >= 1


def test_backup_of_no_database_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BackupError) as info:
        backup(tmp_path / "none.duckdb", tmp_path / "b.duckdb", lock_timeout_s=5)
    assert info.value.reason == "no_database"
    assert not (tmp_path / "b.duckdb").exists()


def test_restore_round_trip_keeps_the_replaced_file(store: Store, db_path: Path, env: dict[str, str],
                                                    tmp_path: Path) -> None:
    run_id, _ = store.submit_run(minimal_plan(), submitted_by=ALICE)
    saved = tmp_path / "saved.duckdb"
    assert backup(db_path, saved, lock_timeout_s=10).row_counts["runs"] == 1
    store.submit_run(minimal_plan(name="after-backup"), submitted_by=ALICE)
    store.audit("alice", "after", None, {})

    result = _cli(env, "restore", str(saved))
    assert result.returncode == 0, result.stderr
    assert [r.id for r in store.list_runs()] == [run_id]
    assert store.migrate() == []  # the restored file is a complete, current schema
    kept = list(tmp_path.glob("bench.duckdb.before-restore-*"))
    assert len(kept) == 1 and str(kept[0]) in result.stdout
    assert verify(kept[0])["runs"] == 2  # the replaced state is still there, whole
    assert not db_path.with_name(db_path.name + ".wal").exists()


def test_restore_refuses_a_corrupt_or_foreign_source(store: Store, db_path: Path, env: dict[str, str],
                                                    tmp_path: Path) -> None:
    store.audit("alice", "mark", None, {})
    before = _audit_ids(db_path)
    garbage = tmp_path / "garbage.duckdb"
    garbage.write_bytes(b"\0not a database" * 1000)
    foreign = tmp_path / "foreign.duckdb"
    duckdb.connect(str(foreign)).close()  # a valid DuckDB file, but not benchdeck's
    truncated = tmp_path / "truncated.duckdb"
    truncated.write_bytes(db_path.read_bytes()[:5000])
    for source, reason in ((garbage, "not_a_database"), (foreign, "no_schema"), (truncated, "not_a_database")):
        with pytest.raises(BackupError) as info:
            restore(db_path, source, lock_timeout_s=5, live_window_s=60)
        assert info.value.reason == reason, source
    result = _cli(env, "restore", str(garbage))
    assert result.returncode == 1 and "DuckDB" in result.stderr and "Traceback" not in result.stderr
    assert _audit_ids(db_path) == before
    assert not list(tmp_path.glob("*before-restore*"))
    assert not list(tmp_path.glob(".*restore*"))


def test_restore_refuses_while_a_runner_is_live(store: Store, db_path: Path, env: dict[str, str],
                                                tmp_path: Path) -> None:
    saved = tmp_path / "saved.duckdb"
    backup(db_path, saved, lock_timeout_s=10)
    store.register_runner("gpu-host-1", host="h", gpu_type="H200", gpu_count=8, sglang_version=None,
                          healthy=True, unhealthy_reason=None, info={})
    result = _cli(env, "restore", str(saved))
    assert result.returncode == 1 and "gpu-host-1" in result.stderr
    assert [r.id for r in store.list_runners()] == ["gpu-host-1"]
    assert _cli(env, "restore", "--force", str(saved)).returncode == 0
    assert store.list_runners() == []


def test_restore_refuses_while_an_attempt_holds_a_lease(store: Store, db_path: Path, tmp_path: Path) -> None:
    saved = tmp_path / "saved.duckdb"
    backup(db_path, saved, lock_timeout_s=10)
    store.submit_run(minimal_plan(), submitted_by=ALICE)
    assert store.claim_next(RunnerCapabilities("busy-runner", "H200", 8, None), lease_s=600) is not None
    with pytest.raises(BackupError) as info:
        restore(db_path, saved, lock_timeout_s=5, live_window_s=1)
    assert info.value.reason == "runner_live" and "busy-runner" in str(info.value)


# --- engine server log rotation -------------------------------------------------------

# Writes numbered lines to stdout and stderr in two halves; between them it waits for the
# test's go-file, so the test can look at it (alive, unbothered) after a rotation.
CHATTY_CHILD = textwrap.dedent("""
    import os, sys, time
    lines, go = int(sys.argv[1]), sys.argv[2]
    fd_before = os.fstat(1).st_ino
    def emit(start, stop):
        for i in range(start, stop):
            stream = sys.stderr if i % 7 == 0 else sys.stdout
            stream.write(f"line {i:07d} " + "x" * (i % 90) + "\\n")
            stream.flush()
    emit(0, lines // 2)
    while not os.path.exists(go):
        time.sleep(0.01)
    emit(lines // 2, lines)
    assert os.fstat(1).st_ino == fd_before
    print("done", flush=True)
""")


def _launch_chatty(tmp_path: Path, lines: int, rotation: LogRotation) -> tuple[server_process.EngineServer, Path]:
    go = tmp_path / "go"
    log = tmp_path / "attempt-1" / "server.log"
    server = server_process.launch([sys.executable, "-c", CHATTY_CHILD, str(lines), str(go)],
                                   port=pick_free_port(31000, 31999),
                                   log_path=log, env={"PATH": "/usr/bin:/bin"}, rotation=rotation)
    return server, go


def _numbers(files: list[Path]) -> list[int]:
    """The line numbers found in ``files`` (oldest first); every line must be whole."""
    found = []
    for file in files:
        text = file.read_text(encoding="utf-8")
        assert text == "" or text.endswith("\n"), f"{file.name} ends mid-line"
        for line in text.splitlines():
            if line != "done":
                number = int(line.split(" ")[1])
                assert line == f"line {number:07d} " + "x" * (number % 90), line
                found.append(number)
    return found


@pytest.mark.slow
def test_server_log_rotates_without_losing_a_line_or_disturbing_the_child(tmp_path: Path) -> None:
    lines = 20_000  # about 1.2 MB: 17 rotations at 64 KiB
    server, go = _launch_chatty(tmp_path, lines, LogRotation(max_bytes=64 * 1024, backups=100))
    log = server.child.log_path
    _wait_for(lambda: log.with_name("server.log.1").exists())
    assert server.child.alive  # rotated under it, and still running
    go.touch()
    server.child.popen.wait(timeout=60)
    server.stop(grace_s=1)
    assert server.child.returncode == 0  # its asserts (all writes went out, fd unchanged) held
    files = list(reversed(log_files(log)))  # oldest backup first, live file last
    # How many files depends on how much the copier reads at once (a busy CI host reads
    # bigger chunks); what must hold is: several rotations, each at or past the limit, by
    # at most one pipe read, and not one line lost or split.
    assert len(files) > 3
    assert _numbers(files) == list(range(lines))
    # The last line is where the log tail finds it: the live file, or the newest backup when
    # the last read crossed the limit and rotated (a loaded host reads bigger chunks).
    assert tail(log).endswith("done\n")
    for backup_file in files[:-1]:
        assert 64 * 1024 <= backup_file.stat().st_size <= 64 * 1024 + 1024 * 1024


@pytest.mark.slow
def test_server_log_keeps_only_the_configured_backups(tmp_path: Path) -> None:
    lines = 20_000
    server, go = _launch_chatty(tmp_path, lines, LogRotation(max_bytes=64 * 1024, backups=3))
    go.touch()
    server.child.popen.wait(timeout=60)
    server.stop(grace_s=1)
    log = server.child.log_path
    assert sorted(p.name for p in log.parent.iterdir()) == ["server.log", "server.log.1", "server.log.2",
                                                           "server.log.3"]
    kept = _numbers(list(reversed(log_files(log))))
    assert kept == list(range(lines - len(kept), lines))  # the newest lines, contiguous
    # The tail reads across the rotated files.  What is kept is three full backups plus the
    # live file, which can be nearly empty right after a rotation: ask for less than the
    # backups alone hold (3 × 64 KiB), so the answer does not depend on where rotation fell.
    tail_chars = 150_000
    assert sum(p.stat().st_size for p in log_files(log)[1:]) >= tail_chars
    assert len(server.log_tail(tail_chars)) == tail_chars


def test_crash_is_classified_from_a_rotated_log(tmp_path: Path) -> None:
    child = textwrap.dedent("""
        import sys
        for i in range(3000):
            print(f"filler {i:05d} " + "." * 100)
        sys.stdout.flush()
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", file=sys.stderr)
        sys.exit(1)
    """)
    server = server_process.launch([sys.executable, "-c", child], port=pick_free_port(31000, 31999),
                           log_path=tmp_path / "server.log", env={"PATH": "/usr/bin:/bin"},
                           rotation=LogRotation(max_bytes=32 * 1024, backups=2))
    server.child.popen.wait(timeout=30)
    failure = server.crash_failure(default=FailureKind.SERVER_CRASH, what="the server exited during start-up")
    assert failure.kind is FailureKind.OOM and "exit code 1" in str(failure)
    server.stop(grace_s=1)
    assert (tmp_path / "server.log.1").exists()


# --- systemd units --------------------------------------------------------------------

UNITS = sorted((ROOT / "ops").glob("*.service"))
SHELL_MARKS = (";", "|", "&", ">", "<", "`", "$(", "bash", "/sh ", "sh -c")


def _service(path: Path) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment, method-assign]  # keys are case-sensitive
    parser.read(path, encoding="utf-8")
    return parser["Service"]


def test_units_exist() -> None:
    assert [p.name for p in UNITS] == ["benchdeck-app.service", "benchdeck-runner.service"]


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_unit_execs_an_absolute_interpreter_without_a_shell(unit: Path) -> None:
    service = _service(unit)
    argv = shlex.split(service["ExecStart"])
    assert argv[0].startswith("/") and argv[0].endswith("/bin/python")
    assert not any(mark in service["ExecStart"] for mark in SHELL_MARKS)
    assert service["EnvironmentFile"] == "/etc/benchdeck/env"
    assert service["User"] == "benchdeck" and service["Restart"] == "on-failure"


def test_runner_unit_stops_warm_then_kills_the_whole_control_group() -> None:
    service = _service(ROOT / "ops" / "benchdeck-runner.service")
    assert shlex.split(service["ExecStart"])[1:] == ["-m", "runner", "serve"]
    # ExecStop: SIGTERM to the runner alone and wait for its warm stop; then the
    # control-group kill reaches everything left, engine servers in their own sessions
    # included (the unit file says why).
    assert service["KillMode"] == "control-group"
    lines = (ROOT / "ops" / "benchdeck-runner.service").read_text(encoding="utf-8").splitlines()
    stops = [shlex.split(line.split("=", 1)[1]) for line in lines if line.startswith("ExecStop=")]
    assert stops == [["/bin/kill", "-s", "TERM", "$MAINPID"], ["/usr/bin/tail", "--pid=$MAINPID", "-f", "/dev/null"]]
    timeout = service["TimeoutStopSec"]
    assert timeout.endswith("min") and int(timeout[:-3]) * 60 > 30 + 600  # stop grace + a 10-min point


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    # verify checks that ExecStart's binary exists: point the units at this checkout.
    for unit in UNITS:
        text = unit.read_text(encoding="utf-8").replace("/opt/benchdeck/.venv/bin/python", sys.executable)
        (tmp_path / unit.name).write_text(text.replace("/opt/benchdeck", str(ROOT)), encoding="utf-8")
    result = subprocess.run(["systemd-analyze", "verify", *(str(tmp_path / u.name) for u in UNITS)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "benchdeck" not in result.stderr, result.stderr
