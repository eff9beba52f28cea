"""How long one forward step of the emulated engine takes: the estimator's step-time model.

The model lives in :mod:`domain.estimate.step_time` (formulas in its docstring) so that
the emulator and the estimator (``python -m runner estimate``) are one model with two
users; its constants are fitted to public measurements (``domain/estimate/calibration.yaml``)
and chosen per emulated GPU in :func:`emulator.config.resolve`.

All times are *device seconds* on the emulated GPU.  The live engine multiplies them by
the time scale ``S`` (``--emulate-time-scale``, default 1: real-GPU speed; 2 means slow
motion at half speed) before sleeping, so everything bench_serving measures is in
``S × device`` seconds: throughputs come out divided by ``S`` and latencies multiplied
by ``S``.  ``S`` is reported in ``/server_info`` (``emulator.time_scale``) and
:func:`emulator.predict.rescale_record` converts a bench record back.
"""

from __future__ import annotations

from domain.estimate.step_time import Ceilings, StepParts, TimingConstants, TimingModel

__all__ = ["Ceilings", "StepParts", "TimingConstants", "TimingModel"]
