"""All of benchdeck's settings, in one pydantic-settings class.

Every field is read from an environment variable ``BENCHDECK_<NAME>`` and every
field is documented in the README's settings table (``tests/test_docs_and_catalogue.py``
fails otherwise).  Timeouts, leases and intervals are settings so that tests can
shorten them.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

PROJECT_ROOT = Path(__file__).resolve().parents[2]
ENDPOINT_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"


def _http_url(value: str, what: str) -> str:
    """An absolute http(s) URL with a host, without query, fragment or credentials."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{what} must be an http:// or https:// URL with a host, got {value!r}")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(f"{what} takes no query, fragment or credentials: {value!r}")
    return value.rstrip("/")


class ExternalEndpoint(BaseModel):
    """A server benchdeck did not start (issue 18), listed by an administrator: plans name it
    by ``name`` only, so no form ever makes the runner send requests to a URL it typed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str, Field(pattern=ENDPOINT_NAME)]
    base_url: str  # the OpenAI-compatible API's root: <base_url>/v1/models, <base_url>/v1/completions
    # The Prometheus text endpoint; the readers fetch "<prefix>/metrics", so it ends in /metrics.
    metrics_url: str | None = None
    # The served model's tokenizer on the runner host (the bench client counts and draws prompts
    # with it; nothing is downloaded).  None: the plan's model must be such a local directory.
    tokenizer_dir: Path | None = None

    @field_validator("base_url")
    @classmethod
    def _base(cls, value: str) -> str:
        base = _http_url(value, "base_url")
        if urlsplit(base).path not in ("", "/"):
            raise ValueError(f"base_url is the server's root (benchdeck adds /v1/...), got {value!r}")
        return base

    @field_validator("metrics_url")
    @classmethod
    def _metrics(cls, value: str | None) -> str | None:
        if value is None:
            return None
        url = _http_url(value, "metrics_url")
        if not urlsplit(url).path.endswith("/metrics"):
            raise ValueError(f"metrics_url must end in /metrics, got {value!r}")
        return url

    @property
    def metrics_base(self) -> str | None:
        """What the /metrics readers (runner/telemetry.py) take: the URL without its /metrics."""
        return None if self.metrics_url is None else self.metrics_url[: -len("/metrics")]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BENCHDECK_", extra="ignore")

    db: Path = Field(
        default=PROJECT_ROOT / "data" / "benchdeck.duckdb",
        description="DuckDB file holding queue, results and telemetry (the embedded default).",
    )
    sglang_python: Path | None = Field(
        default=None,
        description=(
            "Interpreter of the separate SGLang environment on the runner host. Unset means "
            "no real SGLang: the runner serves emulator runs only (demo mode)."
        ),
    )
    vllm_python: Path | None = Field(
        default=None,
        description=(
            "Interpreter of a separate vLLM environment on the runner host. Unset means no real "
            "vLLM: engine vllm plans stay queued for a runner that has it (vllm-emulator runs anywhere)."
        ),
    )
    bench_python: Path = Field(
        default=PROJECT_ROOT / ".venv-sglang" / "bin" / "python",
        description="Interpreter that runs the real bench_serving client (an SGLang environment).",
    )
    router_python: Path = Field(
        default=PROJECT_ROOT / ".venv-router" / "bin" / "python",
        description="Interpreter with the sglang_router package, started for router and PD topologies.",
    )
    model_dirs: list[Path] = Field(
        default_factory=lambda: [PROJECT_ROOT / "data" / "models"],
        description="Directories a model path may resolve into (JSON list).",
    )
    allow_model_downloads: bool = Field(
        default=False,
        description="Let a real engine's server fetch a model from a hub; off: servers run with HF_HUB_OFFLINE=1 "
        "and a plan whose model is not on this host's disk (BENCHDECK_MODEL_DIRS) is refused at submit.",
    )
    flag_policy_file: Path | None = Field(
        default=None,
        description="Security policy for flags (forbidden flags, allowed hosts); unset = the shipped "
        "domain/flags/data/policy.yaml. Edited by an administrator on the runner host; shown read-only in the UI.",
    )
    executor: Literal["local", "ray"] = Field(
        default="local",
        description="Where runs execute: local (this host's GPUs) or ray (any node of a Ray cluster whose "
        "benchdeck_gpu:<TYPE> resource matches; the daemon stays the only DB writer).",
    )
    ray_address: str | None = Field(
        default=None, description="Ray cluster to join with executor=ray (host:port of the head); unset = auto."
    )
    runner_id: str = Field(default="runner-local", description="Name this runner host claims runs as.")
    runner_gpu_type: str = Field(
        default="H200", description="GPU type this runner serves (emulated in demo mode); where NVML works, a type "
        "that is not a word of NVML's device name stops claims.")
    runner_gpu_count: int = Field(default=8, ge=0, description="Number of GPUs this runner serves.")
    app_port: int = Field(default=8501, ge=1, le=65535, description="Port the Streamlit app listens on.")
    app_address: str = Field(default="127.0.0.1", description="Address the Streamlit app binds to.")
    engine_port_range: tuple[int, int] = Field(
        default=(30000, 30999),
        description="Ports the runner picks engine servers' ports from (JSON pair).",
    )
    language: Literal["ja", "en"] = Field(default="ja", description="Default UI and CLI language.")
    lock_timeout_s: float = Field(
        default=10.0, gt=0, description="How long one DB access waits for the file lock before 'busy'."
    )
    lease_s: float = Field(default=60.0, gt=0, description="Lease a runner holds on a claimed attempt.")
    heartbeat_s: float = Field(default=10.0, gt=0, description="How often a runner renews its lease.")
    startup_timeout_s: float = Field(
        default=3600.0, gt=0, description="Budget for an engine server to become ready."
    )
    stop_grace_s: float = Field(default=30.0, ge=0, description="SIGTERM→SIGKILL grace for a process group.")
    poll_s: float = Field(default=2.0, gt=0, description="Runner's idle wait between queue polls (a write it "
                          "serves for another process, such as a run queued, wakes it at once).")
    bench_mode: Literal["auto", "warm", "per-point"] = Field(
        default="auto",
        description="bench_serving client: one warm process per sweep (auto falls back to one per point "
        "for clients that cannot be driven in-process).",
    )
    gpu_settle_s: float = Field(
        default=15.0, ge=0, description="After a teardown, how long the run's GPUs may take to give their memory "
        "back before the host is marked unhealthy.")
    gpu_idle_memory_gb: float = Field(
        default=2.0, ge=0,
        description="GPU memory in use (per GPU) above which an idle GPU counts as used by a foreign process.",
    )
    simulated_gpu_users: Path | None = Field(
        default=None,
        description="Tests and demos only: a JSON file of simulated GPU users [{gpu, pid, used_gb}] that the "
        "GPU guard reads where NVML is unavailable (never where NVML works). Labelled SIMULATED wherever shown.",
    )
    point_timeout_s: float = Field(default=7200.0, gt=0, description="Longest one sweep point may run.")
    liveness_interval_s: float = Field(
        default=5.0, gt=0, description="While a point runs: seconds between /health_generate probes of each server."
    )
    liveness_failures: int = Field(
        default=3, ge=1,
        description="Consecutive failed /health_generate probes (no answer or 5xx) that end a point as server_crash.",
    )
    liveness_window_s: float = Field(
        default=30.0, ge=0, description="Least time those consecutive failures must span before the point ends."
    )
    liveness_probe_timeout_s: float = Field(
        default=30.0, gt=0,
        description="How long one /health_generate probe may take before it counts as unanswered (above SGLang's "
        "SGLANG_HEALTH_CHECK_TIMEOUT, 20 s, so a slow answer is not a failure).",
    )
    telemetry_hz: float = Field(default=4.0, gt=0, le=50, description="Telemetry samples per second.")
    saturation_gain_pct: float = Field(
        default=10.0, gt=0,
        description="Compare: saturation when throughput gains < this % per doubling of concurrency.",
    )
    practical_threshold_pct: float = Field(
        default=2.0, ge=0,
        description="Compare: the practical band of a difference's 95% interval: within it 'same' or 'small', "
        "beyond it better/worse or 'cannot tell' (domain/results/difference.py).",
    )
    interactivity_target: float = Field(
        default=50.0, gt=0,
        description="One number per curve: the interactivity (tok/s/user) at which each curve's output tok/s per "
        "GPU is read, with its interval (Overview, the deck's first slide; domain/results/curve_number.py).",
    )
    sla_metric: Literal["ttft_p99", "tpot_p99", "itl_p99", "e2e_p99"] = Field(
        default="ttft_p99", description="Compare: the p99 latency the SLA applies to."
    )
    sla_ms: float | None = Field(default=None, gt=0, description="Compare: the p99 SLA in ms; unset = no SLA rule.")
    quota_queued_runs_per_user: int = Field(default=20, ge=1, description="Quota: queued runs one user may have.")
    quota_prompts_per_point: int = Field(default=20_000, ge=1, description="Quota: prompts in one sweep point.")
    quota_points_per_run: int = Field(default=500, ge=1, description="Quota: sweep points in one run.")
    quota_concurrency: int = Field(default=1024, ge=1, description="Quota: highest concurrency in a plan.")
    quota_run_hours: float = Field(
        default=24.0, gt=0, description="Quota: longest estimated run time of one plan (rough estimate, hours)."
    )
    auth_mode: Literal["local", "proxy", "oidc"] = Field(
        default="local",
        description="How the app knows who someone is: local (loopback only, the OS user), proxy (a trusted "
        "reverse proxy's identity header) or oidc (st.login with [auth] in .streamlit/secrets.toml).",
    )
    trusted_proxy_header: str = Field(
        default="X-Forwarded-Email", description="Header carrying the identity set by the trusted proxy."
    )
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description="Addresses or CIDR networks of the reverse proxies whose identity header is believed (JSON list).",
    )
    allow_unauthenticated_network: bool = Field(
        default=False,
        description="Let the app listen on a non-loopback address in local mode (anyone who reaches it acts as "
        "the OS user). Off: the app refuses to start that way.",
    )
    admins: list[str] = Field(
        default_factory=list, description="Identities (or @domain) with the admin role (JSON list)."
    )
    operators: list[str] = Field(
        default_factory=list, description="Identities (or @domain) with the operator role (JSON list)."
    )
    viewers: list[str] = Field(
        default_factory=list, description="Identities (or @domain) with the viewer role (JSON list)."
    )
    default_role: Literal["none", "viewer"] = Field(
        default="none", description="Role of an authenticated identity on no allowlist: none = no access."
    )
    local_role: Literal["viewer", "operator", "admin"] = Field(
        default="admin",
        description="Role of the OS user in local mode and of the runner host's shell user in the CLI.",
    )
    server_log_max_mb: float = Field(
        default=200.0, gt=0, description="Size at which an engine server log is rotated (MiB)."
    )
    server_log_backups: int = Field(
        default=3, ge=0, description="Rotated server log files kept per attempt beside the live one."
    )
    max_attempts: int = Field(default=2, ge=1, description="Attempts per run before it fails for good.")
    max_plan_bytes: int = Field(default=256 * 1024, gt=0, description="Largest plan YAML accepted.")
    watch_baseline_runs: int = Field(
        default=3, ge=1, description="Watch: the last N comparable measurements whose median is a watched point's "
        "baseline.")
    watch_throughput_threshold: float = Field(
        default=0.10, gt=0, lt=1, description="Watch: relative throughput change (beyond the repeats' noise band) "
        "that makes a re-run suspicious.")
    watch_latency_threshold: float = Field(
        default=0.10, gt=0, description="Watch: relative p99 latency change (beyond the repeats' noise band) that "
        "makes a re-run suspicious.")
    watch_priority: int = Field(
        default=-50, ge=-100, le=100, description="Watch: queue priority of a watched configuration's re-runs "
        "(below people's default 0).")
    emulated_sglang_version: str | None = Field(
        default=None, description="Demo mode (no real SGLang): the SGLang version this runner host reports to "
        "watched configurations; changing it re-measures them on the emulator under that version's flags.")
    tokenizer_dir: Path = Field(
        default=PROJECT_ROOT / "data" / "tokenizer",
        description="Local tokenizer the emulator and bench client use (built at set-up, nothing downloaded).",
    )
    cache_dir: Path = Field(
        default=PROJECT_ROOT / "data" / "cache",
        description="Caches that outlive restarts: the dumped SGLang flag schema, and the engine servers' JIT caches "
        "(SGLANG_CACHE_DIR, TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR, XDG_CACHE_HOME unless set); not under /tmp, "
        "which the units' PrivateTmp empties at each restart.",
    )
    work_dir: Path = Field(
        default=PROJECT_ROOT / "data" / "runs",
        description="Per-attempt directories: server logs, raw bench output, telemetry files.",
    )
    external_endpoints: list[ExternalEndpoint] = Field(
        default_factory=list,
        description="Servers benchdeck did not start that plans may benchmark with engine: external, named by "
        "'name' (JSON list of {name, base_url, metrics_url, tokenizer_dir}). Set by an administrator; a form "
        "never types a URL.",
    )

    @field_validator("external_endpoints")
    @classmethod
    def _distinct_endpoints(cls, value: list[ExternalEndpoint]) -> list[ExternalEndpoint]:
        names = [endpoint.name for endpoint in value]
        if len(set(names)) != len(names):
            raise ValueError("external endpoint names must be distinct")
        return value

    def external_endpoint(self, name: str) -> ExternalEndpoint | None:
        """The listed endpoint of that name, or None (not listed, or no longer)."""
        return next((endpoint for endpoint in self.external_endpoints if endpoint.name == name), None)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
