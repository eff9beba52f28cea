"""What a real engine's server reads from this host's disk, checked and set before launch:
every weight shard the index names, the config and the tokenizer files are there and
readable (domain/plan/local_models.py), and the server runs offline (``HF_HUB_OFFLINE=1``)
unless BENCHDECK_ALLOW_MODEL_DOWNLOADS, with an HF id found in a cache layout under
BENCHDECK_MODEL_DIRS read from there (``HF_HUB_CACHE``), and JIT caches under
BENCHDECK_CACHE_DIR."""

from __future__ import annotations

import os

from domain.core.settings import Settings
from domain.plan.local_models import find_hf_id, model_disk_errors
from domain.plan.run_plan import RunPlan

REAL_ENGINES = ("sglang", "vllm")
# JIT caches of the engines' kernels, kept under BENCHDECK_CACHE_DIR: in the checkout they
# mix with the code, under /tmp the units' PrivateTmp empties them at each restart (minutes
# of recompiling at the next launch).
JIT_CACHES = {"SGLANG_CACHE_DIR": "sglang", "TRITON_CACHE_DIR": "triton", "TORCHINDUCTOR_CACHE_DIR": "inductor",
              "XDG_CACHE_HOME": "xdg"}


def model_problem(plan: RunPlan, settings: Settings) -> str | None:
    """Why the server could not read its model here (English, for the attempt's message)."""
    if plan.emulated or plan.engine not in REAL_ENGINES:  # the emulator reads no weights
        return None
    errors = model_disk_errors(plan.model, settings.model_dirs, downloads_allowed=settings.allow_model_downloads,
                               lang="en")
    return " ".join(errors) or None


def server_env(plan: RunPlan, settings: Settings) -> dict[str, str]:
    """The environment a plan's servers start with."""
    env = dict(os.environ)
    if plan.emulated or plan.engine not in REAL_ENGINES:
        return env
    for name, sub in JIT_CACHES.items():  # an operator's own choice wins
        env.setdefault(name, str(settings.cache_dir / sub))
    if not settings.allow_model_downloads:
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    snapshot = None if os.path.isabs(plan.model) else find_hf_id(plan.model, settings.model_dirs)
    if snapshot is not None:
        env["HF_HUB_CACHE"] = str(snapshot.parents[2])  # <cache>/models--Org--Name/snapshots/<sha>
    return env
