"""The runner daemon's kept bench client (runner/bench_client.py ``KeptClient``): which
client a run may take over and which one is closed instead.  The clients here hold a real
process (``cat``, reading its stdin as the driver does), so "closed" means the process group
is gone; tests/test_runner_e2e.py runs the real driver through two runs of one daemon."""

from __future__ import annotations

import subprocess
from pathlib import Path

from runner.bench_client import BenchTokenizer, ClientKey, KeptClient, WarmBenchClient
from runner.process import group_alive, start_child

TOKENIZER = BenchTokenizer(Path("/tok"), "toy", 4096, "abc123")


def _client(tmp_path: Path) -> WarmBenchClient:
    client = WarmBenchClient(Path("/python"), tmp_path / "bench.log", {"A": "1"}, tokenizer=TOKENIZER)
    client.child = start_child(["cat"], log_path=client.log_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    return client


def _key(python: str = "/python", env: dict[str, str] | None = None, path: str = "/tok",
         sha: str = "abc123") -> ClientKey:
    return ClientKey.of(Path(python), env or {"A": "1"}, BenchTokenizer(Path(path), "toy", 4096, sha))


def test_the_same_key_takes_the_kept_process_and_counts_the_run(tmp_path: Path) -> None:
    kept, client = KeptClient(), _client(tmp_path)
    assert kept.keep(_key(), client)
    assert kept.take(_key()) is client and client.runs_served == 1
    assert kept.take(_key()) is None  # taken once: nothing is held any more
    client.close()


def test_another_interpreter_env_or_tokenizer_closes_the_kept_process(tmp_path: Path) -> None:
    for other in (_key(python="/other"), _key(env={"A": "2"}), _key(path="/tok2"), _key(sha="changed")):
        kept, client = KeptClient(), _client(tmp_path)
        assert client.child is not None
        pgid = client.child.pgid
        assert kept.keep(_key(), client)
        assert kept.take(other) is None
        assert not group_alive(pgid) and client.child is None


def test_a_client_mid_point_or_dead_is_never_kept(tmp_path: Path) -> None:
    kept, busy = KeptClient(), _client(tmp_path)
    busy.busy = True  # a point was sent and its answer never read (a cancel, a timeout)
    assert not kept.keep(_key(), busy) and kept.client is None
    busy.close()
    dead = _client(tmp_path)
    assert dead.child is not None
    dead.child.popen.kill()
    dead.child.popen.wait()
    assert not kept.keep(_key(), dead) and kept.client is None
    dead.close()


def test_closing_the_keeper_stops_the_process(tmp_path: Path) -> None:
    kept, client = KeptClient(), _client(tmp_path)
    assert client.child is not None
    pgid = client.child.pgid
    assert kept.keep(_key(), client)
    kept.close(grace_s=0)
    assert not group_alive(pgid) and kept.client is None
