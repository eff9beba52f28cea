"""The doctor's checks of settings, interpreters, model directories, ports, disks, files and
auth (the GPU checks: runner/doctor_gpu.py).  Each returns ``Finding``s; none raises."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from domain.core.access import startup_refusal
from domain.core.settings import Settings
from domain.plan.local_models import missing_files, models_under
from runner import host
from runner.doctor import Finding, Status
from runner.env_file_check import disagreements
from runner.process import port_is_free

GIB = 1024**3
DISK_WARN_GIB = 20.0  # attempt dirs, server logs and per-request samples of a day of sweeps
SHM_WARN_GIB = 1.0  # NCCL and SGLang's TP workers share tensors through /dev/shm
SECRET_WORDS = ("SECRET", "TOKEN", "PASSWORD", "KEY")
TORCH_PROBE = ("import json, torch; print(json.dumps({'cuda': torch.cuda.is_available(), "
               "'devices': torch.cuda.device_count(), 'torch': torch.__version__, "
               "'cuda_version': torch.version.cuda}))")


def _run(argv: list[str], timeout_s: float = 300) -> tuple[int, str, float]:
    """(exit code, the output's tail, seconds) of a probe; 127 when it cannot start."""
    started = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)  # noqa: S603
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc), time.monotonic() - started
    return done.returncode, (done.stdout.strip() or done.stderr.strip())[-1500:], time.monotonic() - started


# --- settings ---------------------------------------------------------------------------
def redacted(name: str, value: Any) -> Any:
    """A value whose name has a secret's word in it (``_TOKEN``, not ``_TOKENIZER_DIR``)."""
    words = set(name.upper().split("_"))
    return "***" if words & set(SECRET_WORDS) and value else value


def settings_findings(settings: Settings | None, error: ValidationError | None) -> list[Finding]:
    """Each setting with its source; a settings error is a failure naming the variable."""
    if settings is None:
        names = ", ".join(f"BENCHDECK_{'_'.join(str(p) for p in e['loc']).upper()}" for e in (error.errors()
                                                                                             if error else []))
        return [Finding("settings", "parse", "fail", "settings_invalid", {"names": names, "detail": str(error)})]
    values = {}
    for name in Settings.model_fields:
        env = f"BENCHDECK_{name.upper()}"
        values[env] = {"value": redacted(env, _plain(getattr(settings, name))),
                       "source": "environment" if env in os.environ else "default"}
    from_env = sorted(k for k, v in values.items() if v["source"] == "environment")
    return [Finding("settings", "parse", "ok", "settings_ok", {"n": len(from_env), "names": ", ".join(from_env)},
                    {"settings": values})]


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value.model_dump(mode="json") if hasattr(value, "model_dump") else value


def env_file_findings(env_file: Path | None) -> list[Finding]:
    """Does a shell that sources the env file (the cron backup) read what systemd reads?"""
    if env_file is None:
        return [Finding("settings", "env_file", "skip", "env_file_none")]
    try:
        differ = disagreements(env_file)
    except (OSError, RuntimeError, UnicodeDecodeError) as exc:
        return [Finding("settings", "env_file", "fail", "env_file_unreadable", {"path": env_file, "detail": exc})]
    if differ:
        names = "; ".join(f"{n}: systemd {s!r} / bash {b!r}" for n, s, b in differ)
        return [Finding("settings", "env_file", "fail", "env_file_differs", {"path": env_file, "names": names})]
    return [Finding("settings", "env_file", "ok", "env_file_same", {"path": env_file})]


# --- interpreters -----------------------------------------------------------------------
def interpreter_findings(settings: Settings) -> list[Finding]:
    found = _sglang_findings(settings.sglang_python)
    found += _vllm_findings(settings.vllm_python)
    found.append(_bench_client_finding(settings.bench_python))
    return found


def _sglang_findings(python: Path | None) -> list[Finding]:
    if python is None:
        return [Finding("interpreters", "sglang", "skip", "sglang_unset")]
    from runner.schema_sync import SchemaError, installed_schema

    started = time.monotonic()
    try:
        schema = installed_schema(python)
    except SchemaError as exc:
        return [Finding("interpreters", "sglang", "fail", "sglang_broken", {"python": python, "detail": exc})]
    seconds = round(time.monotonic() - started, 1)
    found = [Finding("interpreters", "sglang", "ok", "sglang_ok",
                     {"version": schema["sglang_version"], "seconds": seconds, "flags": schema.get("num_args")},
                     {"python": str(python), "schema_dump_s": seconds})]
    return [*found, _torch_finding(python)]


def _torch_finding(python: Path) -> Finding:
    code, out, seconds = _run([str(python), "-c", TORCH_PROBE])
    if code != 0:
        return Finding("interpreters", "torch_cuda", "fail", "torch_broken", {"python": python, "detail": out})
    import json

    facts = json.loads(out.splitlines()[-1])
    status: Status = "ok" if facts["cuda"] and facts["devices"] > 0 else "fail"
    context = {**facts, "seconds": round(seconds, 1)}
    return Finding("interpreters", "torch_cuda", status, f"torch_cuda_{status}", context, facts)


def _vllm_findings(python: Path | None) -> list[Finding]:
    if python is None:
        return [Finding("interpreters", "vllm", "skip", "vllm_unset")]
    code, out, _ = _run([str(python), "-c", "import importlib.metadata as m; print(m.version('vllm'))"], 60)
    if code != 0:
        return [Finding("interpreters", "vllm", "fail", "vllm_broken", {"python": python, "detail": out})]
    return [Finding("interpreters", "vllm", "ok", "vllm_ok", {"version": out})]


def _bench_client_finding(python: Path) -> Finding:
    """The client's module is where its interpreter finds SGLang (not imported: that loads
    torch, up to a minute on a busy host; ``--tiny-run`` starts the real client)."""
    probe = ("import importlib.util as u, os, sys; s = u.find_spec('sglang'); "
             "sys.exit(s is None or not os.path.isfile(os.path.join(s.submodule_search_locations[0], "
             "'bench_serving.py')))")
    code, out, seconds = _run([str(python), "-c", probe], 120)
    if code != 0:
        return Finding("interpreters", "bench_client", "fail", "bench_broken", {"python": python, "detail": out})
    return Finding("interpreters", "bench_client", "ok", "bench_ok", {"python": python, "seconds": round(seconds, 1)})


# --- model directories ------------------------------------------------------------------
def model_dir_findings(settings: Settings) -> list[Finding]:
    """Each BENCHDECK_MODEL_DIRS entry readable, with the models found under it (their
    config.json facts); a model lacking a shard, its config or its tokenizer fails."""
    if not settings.model_dirs:
        return [Finding("models", "dirs", "warn", "model_dirs_none")]
    found = []
    for directory in settings.model_dirs:
        if not directory.is_dir() or not os.access(directory, os.R_OK | os.X_OK):
            found.append(Finding("models", str(directory), "fail", "model_dir_unreadable", {"path": directory}))
            continue
        models = models_under(directory)
        found.append(Finding("models", str(directory), "ok", "model_dir_ok", {"path": directory, "n": len(models)},
                             {"models": [m.as_row() for m in models]}))
        found += [_model_files_finding(model.name, model.path) for model in models]
    return found


def _model_files_finding(name: str, path: Path) -> Finding:
    missing = missing_files(path)
    if missing:
        return Finding("models", name, "fail", "model_files_missing", {"path": path, "files": ", ".join(missing)})
    return Finding("models", name, "ok", "model_files_ok", {"path": path})


# --- ports, disks, files ----------------------------------------------------------------
def port_findings(settings: Settings) -> list[Finding]:
    low, high = settings.engine_port_range
    free = sum(port_is_free(port) for port in range(low, high + 1))
    status: Status = "ok" if free >= 3 else "fail"  # a PD run takes a router, a prefill and a decode port at least
    found = [Finding("ports", "engine_range", status, f"ports_{status}", {"low": low, "high": high, "free": free})]
    app_free = port_is_free(settings.app_port)
    found.append(Finding("ports", "app", "ok" if app_free else "warn",
                         "app_port_free" if app_free else "app_port_taken", {"port": settings.app_port}))
    return found


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def disk_findings(settings: Settings, backup_dir: Path | None) -> list[Finding]:
    places = {"work_dir": settings.work_dir, "db_dir": settings.db.parent}
    if backup_dir is not None:
        places["backup_dir"] = backup_dir
    found = [_disk_finding(name, path) for name, path in places.items()]
    return [*found, _shm_finding()]


def _disk_finding(name: str, path: Path) -> Finding:
    where = _existing(path)
    usage = shutil.disk_usage(where)
    free_gib = round(usage.free / GIB, 1)
    full = host.disk_full(where) if os.access(where, os.W_OK) else None
    status: Status = "fail" if full else "warn" if free_gib < DISK_WARN_GIB else "ok"
    return Finding("disk", name, status, f"disk_{status}", {"path": path, "free": free_gib, "detail": full or ""},
                   {"free_gib": free_gib, "total_gib": round(usage.total / GIB, 1)})


def _shm_finding() -> Finding:
    shm = Path("/dev/shm")  # noqa: S108 - the shared-memory mount itself, not a temporary file
    if not shm.is_dir():
        return Finding("disk", "dev_shm", "fail", "shm_missing")
    size_gib = round(shutil.disk_usage(shm).total / GIB, 1)
    status: Status = "warn" if size_gib < SHM_WARN_GIB else "ok"
    return Finding("disk", "dev_shm", status, f"shm_{status}", {"size": size_gib}, {"size_gib": size_gib})


def ownership_findings(settings: Settings) -> list[Finding]:
    """The DB file (and its WAL), its directory and the work directory must be writable by
    this user: a restore run as root leaves a file the runner cannot open."""
    paths = [settings.db, Path(f"{settings.db}.wal"), settings.db.parent, settings.work_dir]
    found = []
    for path in paths:
        if not path.exists():
            continue
        writable = os.access(path, os.W_OK)
        owner = _owner(path)
        found.append(Finding("files", path.name or str(path), "ok" if writable else "fail",
                             "file_ok" if writable else "file_not_writable",
                             {"path": path, "owner": owner, "user": _me()}))
    return found or [Finding("files", "db", "skip", "file_none", {"path": settings.db})]


def _owner(path: Path) -> str:
    import pwd

    uid = path.stat().st_uid
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _me() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


# --- auth -------------------------------------------------------------------------------
def auth_findings(settings: Settings) -> list[Finding]:
    refusal = startup_refusal(mode=settings.auth_mode, address=settings.app_address,
                              has_oidc_secrets=Path(".streamlit/secrets.toml").exists(),
                              trusted_proxies=settings.trusted_proxies,
                              allow_open_network=settings.allow_unauthenticated_network)
    if refusal is not None:
        return [Finding("auth", "app_start", "fail", "auth_refused", {"detail": refusal})]
    found = [Finding("auth", "app_start", "ok", "auth_starts", {"mode": settings.auth_mode})]
    if settings.auth_mode == "local":
        return found
    listed = len(settings.admins) + len(settings.operators) + len(settings.viewers)
    if listed == 0 and settings.default_role == "none":
        return [*found, Finding("auth", "allow_lists", "fail", "auth_nobody")]
    return [*found, Finding("auth", "allow_lists", "ok", "auth_lists", {"n": listed})]
