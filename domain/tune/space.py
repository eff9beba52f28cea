"""The search space of a study: the seed's levers, spelled for an SGLang version, bounded
by a contest rule profile, and turned into one trial's run plan.

The levers are the team's notes' list (domain/flags/data/levers.yaml): running-request cap,
chunked prefill, prefill token budget, schedule policy, the decode CUDA-graph batch size
(``cuda-graph-max-bs-decode`` from 0.5.15, ``cuda-graph-max-bs`` before: the spelling comes
from the version's schema, domain/flags/drift.py), ``mem-fraction-static`` and
``num-continuous-decode-steps``; plus the layout (TP, EP, attention DP) as one lever.

The layout is one categorical lever named :data:`LAYOUT` whose choices are whole flag sets
written ``"tp-size=8,ep-size=2"``: TP, EP and attention DP constrain each other (EP and
attention DP divide TP, SGLang 0.5.23 refuses ``dp-size`` > 1 with ``attn-dp-size`` > 1), so
searching them as independent numbers would spend trials on layouts that cannot start.
:func:`expand_params` turns a layout choice back into flags.

A flag (or a value) the rule profile bans (domain/flags/data/rules/<profile>.yaml, read
through domain/flags/risk.py) never enters a space: :func:`default_space` leaves it out,
:func:`space_problems` names it in a hand-written space, and :func:`propose` refuses it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import optuna

from domain.core.i18n import t
from domain.flags.drift import spellings, usable
from domain.flags.risk import Rule, classify_flag, load_profile
from domain.flags.schema import Schema, load_schema
from domain.plan.memory_fit import memory_fit_for_args
from domain.plan.presets import gpu_preset, model_preset_for
from domain.plan.run_plan import RunPlan
from domain.tune.study import LAYOUT, Choice, Lever, Study, study_tag, trial_tag

ParamValue = str | int | float | bool

# The decode CUDA-graph batch-size flag, newest spelling first (drift.yaml rule cuda_graph_max_bs).
GRAPH_BS_SPELLINGS = ("cuda-graph-max-bs-decode", "cuda-graph-max-bs")
# Ranges around SGLang's own defaults on a large GPU (domain/plan/presets.py _levers): each
# spans the values the seed's cautions name as too low and too high.
_RANGES: tuple[Lever, ...] = (
    Lever(flag="max-running-requests", kind="int", low=16, high=1024, log=True),
    Lever(flag="chunked-prefill-size", kind="choice", choices=[2048, 4096, 8192, 16384]),
    Lever(flag="max-prefill-tokens", kind="choice", choices=[4096, 8192, 16384, 32768]),
    Lever(flag="mem-fraction-static", kind="float", low=0.70, high=0.93, step=0.01),
    Lever(flag="num-continuous-decode-steps", kind="choice", choices=[1, 2, 4, 8]),
)
_GRAPH_BS_CHOICES: list[Choice] = [32, 64, 128, 256, 512]
# Policies that need something a plain benchmark does not send (priorities, routing keys)
# are left out of the default; the schema decides which of the rest the version knows.
_POLICIES = ("fcfs", "lpm", "dfs-weight", "lof", "random", "hrrn", "shortest-prefill-first")


# -- the rule profile ---------------------------------------------------------------------------


def banned_rule(flag: str, value: object, rule_profile: str) -> Rule | None:
    """The rule of ``rule_profile`` that forbids ``flag`` at ``value`` (its ja/en reason), or None.
    A switch set to false is off and breaks nothing (domain/flags/risk.py counts it inactive)."""
    if value is None or value is False:
        return None
    layer = classify_flag(flag)
    for rule in load_profile(rule_profile).rules:
        if any(ban.hits(flag, value, layer) for ban in rule.bans):
            return rule
    return None


def banned_reason(flag: str, value: object, rule_profile: str) -> str | None:
    """Why the profile forbids ``flag`` = ``value``, in English (the rule's ja/en reason is
    :func:`banned_rule`'s), or None when it is allowed."""
    rule = banned_rule(flag, value, rule_profile)
    if rule is None:
        return None
    return f"--{flag} {value}: rule {rule.id} of profile {rule_profile}: {rule.reason['en']}"


def _lever_values(lever: Lever) -> list[object]:
    """Values that stand for the lever when checking bans: each choice, or a range's ends
    (a ban on a flag without a value list hits every value)."""
    return list(lever.choices or ()) if lever.kind == "choice" else [lever.low, lever.high]


def lever_bans(lever: Lever, rule_profile: str) -> list[tuple[str, object, Rule]]:
    """(flag, value, rule) for every value of ``lever`` the profile forbids (layouts flag by flag)."""
    bans: list[tuple[str, object, Rule]] = []
    for value in _lever_values(lever):
        for flag, flag_value in expand_params({lever.flag: value}).items():
            rule = banned_rule(flag, flag_value, rule_profile)
            if rule is not None:
                bans.append((flag, flag_value, rule))
    return bans


def space_problems(space: Sequence[Lever], rule_profile: str) -> list[str]:
    """Why the profile forbids part of ``space``, one English sentence per banned value."""
    return [banned_reason(flag, value, rule_profile) or "" for lever in space
            for flag, value, _ in lever_bans(lever, rule_profile)]


# -- the default space ---------------------------------------------------------------------------


def graph_bs_flag(schema: Schema) -> str | None:
    """How ``schema``'s version spells the decode CUDA-graph batch-size cap."""
    return next((name for name in GRAPH_BS_SPELLINGS if usable(schema, name)), None)


def _policy_lever(schema: Schema) -> Lever | None:
    spec = schema.lookup("schedule-policy")
    if spec is None:
        return None
    known = set(spec.choices or _POLICIES)
    return Lever(flag="schedule-policy", kind="choice", choices=[p for p in _POLICIES if p in known])


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _layout_text(flags: Mapping[str, ParamValue]) -> str:
    return ",".join(f"{flag}={str(value).lower() if isinstance(value, bool) else value}"
                    for flag, value in flags.items())


def _attention_dp(schema: Schema, groups: int) -> dict[str, ParamValue]:
    """Attention DP over ``groups`` groups, as the version writes it (drift rule enable_dp_attention)."""
    if usable(schema, "attn-dp-size"):
        return {"attn-dp-size": groups}
    return {"enable-dp-attention": True, "dp-size": groups}


def layouts(schema: Schema, gpu_count: int) -> list[str]:
    """Every TP × EP × attention-DP layout on ``gpu_count`` GPUs: TP divides the GPUs (the
    rest are data-parallel replicas, ``dp-size``), EP and attention DP divide TP, attention
    DP only on a single replica."""
    out = []
    for tp in _divisors(gpu_count):
        replicas = gpu_count // tp
        for ep in _divisors(tp):
            for attn_dp in _divisors(tp) if replicas == 1 else [1]:
                flags: dict[str, ParamValue] = {"tp-size": tp}
                if ep > 1:
                    flags["ep-size"] = ep
                if replicas > 1:
                    flags["dp-size"] = replicas
                if attn_dp > 1:
                    flags.update(_attention_dp(schema, attn_dp))
                out.append(_layout_text(flags))
    return out


def default_space(version: str, gpu_count: int, rule_profile: str) -> list[Lever]:
    """The seed's levers as ``version`` spells them, and the layouts of ``gpu_count`` GPUs;
    a lever (or a choice) the rule profile bans is left out."""
    schema = load_schema(version)
    levers = [lever for lever in _RANGES if usable(schema, lever.flag)]
    policy = _policy_lever(schema)
    levers += [policy] if policy is not None else []
    graph = graph_bs_flag(schema)
    levers += [Lever(flag=graph, kind="choice", choices=_GRAPH_BS_CHOICES)] if graph is not None else []
    levers.append(Lever(flag=LAYOUT, kind="choice", choices=list(layouts(schema, gpu_count))))
    return allowed_space(levers, rule_profile)


def allowed_space(space: Sequence[Lever], rule_profile: str) -> list[Lever]:
    """``space`` without what the profile bans: a banned choice is dropped, a lever with
    nothing allowed left (or a range over a banned flag) is dropped whole."""
    return [kept for lever in space if (kept := _allowed_part(lever, rule_profile)) is not None]


def _allowed_part(lever: Lever, rule_profile: str) -> Lever | None:
    """The lever without the choices the profile bans; None when nothing of it is allowed."""
    if lever.kind != "choice":
        return None if lever_bans(lever, rule_profile) else lever
    allowed = [c for c in lever.choices or () if not lever_bans(lever.model_copy(update={"choices": [c]}),
                                                                 rule_profile)]
    return lever.model_copy(update={"choices": allowed}) if allowed else None


# -- one trial -----------------------------------------------------------------------------------


def _parse_layout(text: str) -> dict[str, ParamValue]:
    flags: dict[str, ParamValue] = {}
    for item in text.split(","):
        flag, _, raw = item.partition("=")
        flags[flag] = True if raw == "true" else int(raw)
    return flags


def expand_params(params: Mapping[str, object]) -> dict[str, ParamValue]:
    """Optuna's parameters as server flags: a :data:`LAYOUT` choice becomes its flags."""
    out: dict[str, ParamValue] = {}
    for name, value in params.items():
        if name == LAYOUT:
            out.update(_parse_layout(str(value)))
        elif isinstance(value, float):
            out[name] = float(f"{value:.10g}")  # a stepped range's 0.7999999999999999 is the 0.8 meant
        else:
            out[name] = value  # type: ignore[assignment]
    return out


class BannedProposal(ValueError):
    """A lever proposed a value the study's rule profile forbids (the space was not checked)."""


def _suggest(trial: optuna.trial.BaseTrial, lever: Lever) -> ParamValue:
    if lever.kind == "choice":
        value = trial.suggest_categorical(lever.flag, list(lever.choices or ()))
        if value is None:  # not one of a Lever's choice types; Optuna only hands back a choice
            raise ValueError(f"{lever.flag}: no choice")
        return value
    low, high = float(lever.low or 0.0), float(lever.high or 0.0)  # both set: Lever's validator
    if lever.kind == "int":
        return trial.suggest_int(lever.flag, int(low), int(high), step=int(lever.step or 1), log=lever.log)
    return trial.suggest_float(lever.flag, low, high, step=lever.step, log=lever.log)


def propose(trial: optuna.trial.BaseTrial, space: list[Lever],
            rule_profile: str | None = None) -> dict[str, ParamValue]:
    """One value per lever from ``trial``, as server flags (layouts expanded).  With
    ``rule_profile``, a banned value raises :class:`BannedProposal` instead of being returned."""
    flags = expand_params({lever.flag: _suggest(trial, lever) for lever in space})
    if rule_profile is not None:
        reasons = [r for flag, value in flags.items() if (r := banned_reason(flag, value, rule_profile))]
        if reasons:
            raise BannedProposal("; ".join(reasons))
    return flags


def trial_name(study_name: str, number: int) -> str:
    return f"{study_name} · trial {number}"


def trial_plan(study: Study, params: Mapping[str, object], number: int) -> RunPlan:
    """The base plan with the trial's flags merged into its server_args (a layout expanded),
    tagged with the study and the trial, named "<study> · trial <n>"."""
    base = study.base_plan
    tags = list(dict.fromkeys([*base.tags, study_tag(study.name), trial_tag(number)]))
    kept = dict(base.server_args)
    if LAYOUT in params:  # a layout replaces the base plan's whole layout, not just the flags it names
        kept = {flag: value for flag, value in kept.items() if flag not in _layout_spellings()}
    data = base.model_dump(mode="python")
    data.update(name=trial_name(study.name, number), server_args={**kept, **expand_params(params)}, tags=tags)
    return RunPlan.model_validate(data)


def _layout_spellings() -> frozenset[str]:
    names = ("tp-size", "ep-size", "dp-size", "attn-dp-size", "enable-dp-attention", "pp-size")
    return frozenset(spelling for name in names for spelling in spellings(name))


def cannot_start(plan: RunPlan, lang: str = "en") -> str | None:
    """Why the memory-fit check (domain/plan/memory_fit.py) says this configuration cannot
    start on its GPUs — the weights leave no KV cache, the MoE split breaks the FP8 block
    rule, or the layout needs more GPUs than the plan has — in ``lang``; None when it may
    start.  A plan whose model or GPU has no preset cannot be judged and passes."""
    model, gpu = model_preset_for(plan.model), gpu_preset(plan.gpu.type)
    if model is None or gpu is None:
        return None
    fit = memory_fit_for_args(plan.server_args, model, gpu, gpu_count=plan.gpu.count)
    if fit.verdict == "does_not_fit":
        return fit.text(lang).split("\n")[0]
    if not fit.moe_layout.ok and model.weight_dtype == "fp8":  # the 128 multiple is the FP8 block size
        return t("tune_domain.moe_split", lang, tp=fit.layout.tp, ep=fit.layout.ep,
                 per_rank=f"{fit.moe_layout.per_rank:g}")
    if fit.layout.gpus > plan.gpu.count:
        return t("tune_domain.too_many_gpus", lang, needed=fit.layout.gpus, count=plan.gpu.count)
    return None
