"""Checks on a whole plan before it is queued (and, for flags, again by the runner before
launch): flag validation against the chosen SGLang version, rule risk, memory fit.

The CLI prints ``detail``; the form shows ``errors`` and ``warnings`` beside the fields.
Only flag errors block a submission: a broken contest rule or a memory verdict is shown
as a warning, because the team also explores configurations for rules not yet final and
the estimate is an estimate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from domain.core.i18n import t
from domain.core.settings import Settings
from domain.engines import adapter_for
from domain.flags.policy import load_policy
from domain.flags.schema import available_versions, known_versions, newest_version
from domain.flags.validate import check_versions
from domain.plan.flag_report import ConfigCheck, check_configuration, format_check_report
from domain.plan.local_models import local_context_length, model_disk_errors
from domain.plan.presets import model_preset_for
from domain.plan.quality_checks import quality_problems
from domain.plan.run_plan import RunPlan
from domain.plan.thinking import is_set, template_problem
from domain.plan.transfer_backend import BACKEND_PACKAGES, DEFAULT_BACKEND, unnamed_backend_roles
from domain.plan.workload_files import workload_file_problems

QWEN3_2507_CONTEXT = 262_144


@dataclass
class CheckReport:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    detail: str = ""
    config: ConfigCheck | None = None

    @property
    def ok(self) -> bool:
        return not self.errors


def schema_version_for(plan: RunPlan, host_version: str | None = None) -> str:
    """The SGLang version whose flags a plan is checked against: the plan's own, else the
    runner host's installed one, else the newest shipped schema."""
    return plan.sglang_version or host_version or newest_version()


def unknown_version_error(version: str, lang: str) -> str | None:
    """A refusal naming the versions that exist, when neither benchdeck nor a registered
    runner host (domain.flags.schema.register_host_schema) has a schema for ``version``."""
    versions = available_versions()
    if version in versions:
        return None
    return t("check.version_unknown", lang, version=version, versions=", ".join(versions))


def emulator_version_error(plan: RunPlan, lang: str) -> str | None:
    """The emulator reads its flags from the shipped schemas only (emulator/flags.py): a plan
    pinned to a version only a runner host reports would fail its launch, retried, on every runner."""
    if not plan.emulated or plan.sglang_version is None or plan.sglang_version in known_versions():
        return None
    return t("check.emulator_version", lang, version=plan.sglang_version, versions=", ".join(known_versions()))


def configuration_check(plan: RunPlan, settings: Settings, host_version: str | None = None) -> ConfigCheck:
    bench = plan.benchmark
    largest = max(bench.sweep_scenarios(), key=lambda s: s.input_len + s.output_len)
    return check_configuration(
        plan.server_args, schema_version_for(plan, host_version), model_dirs=settings.model_dirs, model=plan.model,
        gpu_type=plan.gpu.type, gpu_count=plan.gpu.count, input_len=largest.input_len,
        output_len=largest.output_len, concurrency=max(bench.concurrency),
        policy=load_policy(settings.flag_policy_file),
    )


def role_checks(plan: RunPlan, settings: Settings, host_version: str | None = None) -> list[tuple[str, ConfigCheck]]:
    """Each topology role's own flags (plan-wide ones merged in), checked like a server's
    own: one check per role, against the GPUs one of its servers gets."""
    bench = plan.benchmark
    largest = max(bench.sweep_scenarios(), key=lambda s: s.input_len + s.output_len)
    checks = []
    for role, group in plan.topology.groups():
        args = {**plan.server_args, **group.server_args}
        checks.append((role, check_configuration(
            args, schema_version_for(plan, host_version), model_dirs=settings.model_dirs, model=plan.model,
            gpu_type=plan.gpu.type, gpu_count=group.gpus_per_server, input_len=largest.input_len,
            output_len=largest.output_len, concurrency=max(bench.concurrency),
            policy=load_policy(settings.flag_policy_file),
        )))
    return checks


def vllm_version_for(plan: RunPlan, host_version: str | None = None) -> str:
    """The vLLM version whose flags a vLLM plan is checked against: the plan's own, else
    the runner host's installed one, else the newest shipped schema (what the emulator speaks)."""
    return engine_version_for(plan, host_version)


def engine_version_for(plan: RunPlan, host_version: str | None = None) -> str:
    """The version whose flags a plan of an engine other than SGLang is checked against: the
    plan's own, else the runner host's, else the newest schema of its engine."""
    return plan.engine_version or host_version or adapter_for(plan.engine).flags.newest_version()


def check_plan(plan: RunPlan, settings: Settings, lang: str, host_version: str | None = None, *,
               every_vllm_version: bool = False) -> CheckReport:
    """The engine's checks (:func:`_engine_checks`) and the quality section's
    (domain/plan/quality_checks.py)."""
    report = _engine_checks(plan, settings, lang, host_version, every_vllm_version=every_vllm_version)
    errors, warnings = quality_problems(plan, lang)
    report.errors += errors
    report.warnings += warnings
    report.detail += "".join(f"\n{line}" for line in errors + warnings)
    return report


def _engine_checks(plan: RunPlan, settings: Settings, lang: str, host_version: str | None = None, *,
                   every_vllm_version: bool = False) -> CheckReport:
    """``every_vllm_version`` (``python -m runner check``): a vLLM plan that pins no version is
    checked against every shipped vLLM schema, each line naming its version; otherwise
    against the version it will run with.  A workload's file is checked whatever the engine."""
    report = _check_by_engine(plan, settings, lang, host_version, every_vllm_version)
    if plan.benchmark.workload is not None:
        file_errors = [problem.text(lang) for problem in workload_file_problems(plan.benchmark.workload)]
        report.errors += file_errors
        report.detail += "".join(f"\n{line}" for line in file_errors)
    return report


def _check_by_engine(plan: RunPlan, settings: Settings, lang: str, host_version: str | None,
                     every_vllm_version: bool) -> CheckReport:
    if plan.external is not None:
        return _check_external_plan(plan, settings, lang)
    if plan.engine != "sglang":
        pinned = plan.engine_version is not None
        versions = None if every_vllm_version and not pinned else [engine_version_for(plan, host_version)]
        return _check_engine_plan(plan, settings, lang, versions)
    unknown = unknown_version_error(schema_version_for(plan, host_version), lang) or emulator_version_error(plan, lang)
    if unknown is not None:
        return CheckReport(errors=[unknown], detail=unknown)
    config = configuration_check(plan, settings, host_version)
    report = CheckReport(detail=format_check_report(config, lang), config=config)
    for role, role_config in role_checks(plan, settings, host_version):
        report.errors += [f"{role}: {issue.message(lang)}" for issue in role_config.flags.errors]
        report.warnings += [f"{role}: {issue.message(lang)}" for issue in role_config.flags.warnings]
    report.errors += [issue.message(lang) for issue in config.flags.errors]
    report.warnings += [issue.message(lang) for issue in config.flags.warnings]
    report.warnings += [broken.text(lang) for broken in config.risk.broken]
    if config.memory is not None and (config.memory.verdict != "fits" or config.memory.warnings):
        report.warnings.append(config.memory.text(lang))
    report.warnings += no_interpreter_warnings(plan, settings, lang)
    model_errors = real_model_errors(plan, settings, lang)
    report.errors += model_errors
    report.detail += "".join(f"\n{error}" for error in model_errors)
    context_errors = context_length_errors(plan, lang, settings.model_dirs)
    report.errors += context_errors
    report.detail += "".join(f"\n{error}" for error in context_errors)  # the flag report does not carry them
    report.warnings += default_backend_warnings(plan, lang)
    thinking_errors, thinking_warnings = thinking_checks(plan, settings, lang)
    report.errors += thinking_errors
    report.warnings += thinking_warnings
    report.detail += "".join(f"\n{line}" for line in thinking_errors + thinking_warnings)
    return report


def no_interpreter_warnings(plan: RunPlan, settings: Settings, lang: str) -> list[str]:
    """A real engine's plan checked where that engine's interpreter is not configured: a
    runner with it will run the plan (the adapter names the setting and the warning)."""
    adapter = adapter_for(plan.engine)
    if plan.emulated or getattr(settings, adapter.interpreter_setting, None) is not None:
        return []
    return [t(adapter.no_interpreter_key, lang)]


def _check_engine_plan(plan: RunPlan, settings: Settings, lang: str, versions: list[str] | None) -> CheckReport:
    """A plan of an engine other than SGLang (vLLM's, or a family registered later): its flags
    against those versions' schemas (None: every shipped one) and its engine's policy, through
    its adapter's flag dialect; no memory fit or contest-rule check (both model SGLang)."""
    check = check_versions(adapter_for(plan.engine).flags, plan.server_args, lang, model_dirs=settings.model_dirs,
                           model=plan.model, versions=versions)
    report = CheckReport(errors=list(check.errors), warnings=list(check.warnings), detail=check.detail)
    report.warnings += no_interpreter_warnings(plan, settings, lang)
    model_errors = real_model_errors(plan, settings, lang)
    report.errors += model_errors
    report.detail += "".join(f"\n{error}" for error in model_errors)
    context_errors = context_length_errors(plan, lang, settings.model_dirs)
    report.errors += context_errors
    thinking_errors, thinking_warnings = thinking_checks(plan, settings, lang)
    report.errors += thinking_errors
    report.warnings += thinking_warnings
    report.detail += "".join(f"\n{line}" for line in context_errors + thinking_errors + thinking_warnings)
    return report


def real_model_errors(plan: RunPlan, settings: Settings, lang: str) -> list[str]:
    """A real engine reads the model from this host's disk (domain/plan/local_models.py):
    refused here when this host runs that engine (app and runner share the host); where it
    does not, the runner host's disk is not this one, and the runner checks before launch."""
    if plan.emulated or plan.is_external or getattr(settings, adapter_for(plan.engine).interpreter_setting,
                                                     None) is None:
        return []
    return model_disk_errors(plan.model, settings.model_dirs, downloads_allowed=settings.allow_model_downloads,
                             lang=lang)


def external_endpoint_error(plan: RunPlan, settings: Settings, lang: str) -> str | None:
    """An external plan whose endpoint BENCHDECK_EXTERNAL_ENDPOINTS does not list (the runner
    checks its own list again before any request: the list may change after submit)."""
    if plan.external is None or settings.external_endpoint(plan.external.endpoint) is not None:
        return None
    listed = ", ".join(endpoint.name for endpoint in settings.external_endpoints) or t("check.external_none", lang)
    return t("check.external_unlisted", lang, endpoint=plan.external.endpoint, listed=listed)


def _check_external_plan(plan: RunPlan, settings: Settings, lang: str) -> CheckReport:
    """A server benchdeck did not start: no flags to validate (it sets none), no memory fit
    (its GPUs are not benchdeck's); the endpoint must be listed, and what the plan declares
    is said to be declared."""
    assert plan.external is not None  # noqa: S101 - the caller's branch
    report = CheckReport()
    unlisted = external_endpoint_error(plan, settings, lang)
    if unlisted is not None:
        report.errors.append(unlisted)
    endpoint = settings.external_endpoint(plan.external.endpoint)
    if endpoint is not None and endpoint.metrics_url is None:
        report.warnings.append(t("check.external_no_metrics", lang, endpoint=endpoint.name))
    report.warnings.append(t("check.external_declared", lang, engine=plan.external.engine,
                             version=plan.external.version or "?", model=plan.model,
                             gpus=f"{plan.gpu.count}× {plan.gpu.type}"))
    report.errors += context_length_errors(plan, lang, settings.model_dirs)
    thinking_errors, thinking_warnings = thinking_checks(plan, settings, lang)
    report.errors += thinking_errors
    report.warnings += thinking_warnings
    report.detail = "\n".join(report.errors + report.warnings)
    return report


def thinking_checks(plan: RunPlan, settings: Settings, lang: str) -> tuple[list[str], list[str]]:
    """(errors, warnings) of the plan's thinking mode against the chat template its server
    renders (domain/plan/thinking.py): a template that ignores ``enable_thinking`` refuses
    the plan; one that cannot be read here, or outputs fixed by ``ignore_eos``, warn."""
    if not is_set(plan.benchmark.thinking_mode):
        return [], []
    errors: list[str] = []
    warnings: list[str] = []
    problem = template_problem(plan, settings.tokenizer_dir)
    if problem is not None:
        kind, context = problem
        (warnings if kind == "thinking_template_unknown" else errors).append(t(f"plan.problem.{kind}", lang, **context))
    if plan.benchmark.ignore_eos:
        warnings.append(t("plan.problem.thinking_fixed_length", lang))
    return errors, warnings


def default_backend_warnings(plan: RunPlan, lang: str) -> list[str]:
    """A PD plan that leaves the transfer backend to SGLang's default: a warning only, as
    this side cannot see the runner host's SGLang environment (the runner refuses the run
    when the default's package is missing there: runner/backend_probe.py)."""
    roles = unnamed_backend_roles(plan)
    needs = BACKEND_PACKAGES.get(DEFAULT_BACKEND)
    if not roles or needs is None:
        return []
    return [t("check.pd_backend_default", lang, roles=", ".join(roles), backend=DEFAULT_BACKEND, package=needs[1])]


def context_length(plan: RunPlan, model_dirs: Sequence[Path] = ()) -> tuple[int, str] | None:
    """The context length the server will enforce and where it comes from: the plan's
    ``context-length`` flag, else the ``max_position_embeddings`` of the model's config.json
    on this host's disk, else of the preset model (what SGLang defaults to); None for a model
    benchdeck does not know."""
    flag = plan.server_args.get("context-length")
    if isinstance(flag, int) and not isinstance(flag, bool) and flag > 0:
        return flag, "--context-length"
    local = local_context_length(plan.model, model_dirs)
    if local is not None:
        return local
    preset = model_preset_for(plan.model)
    if preset is None:
        return None
    if "-2507" in plan.model:  # the 2507 releases share the shape, not the context (their model cards)
        return QWEN3_2507_CONTEXT, plan.model.rstrip("/").rsplit("/", 1)[-1]
    return preset.max_position_embeddings, preset.hf_id


def context_length_errors(plan: RunPlan, lang: str, model_dirs: Sequence[Path] = ()) -> list[str]:
    """A scenario whose longest request does not fit the context: the server refuses
    each such request (SGLang checks input >= context and input + output > context), so
    the point would measure refusals.  Random lengths never exceed the scenario's."""
    known = context_length(plan, model_dirs)
    if known is None:
        return []
    limit, source = known
    return [
        t("check.context_too_long", lang, scenario=s.name, input_len=s.input_len, output_len=s.output_len,
          total=s.input_len + s.output_len, context=limit, source=source)
        for s in plan.benchmark.sweep_scenarios()
        if s.input_len >= limit or s.input_len + s.output_len > limit
    ]
