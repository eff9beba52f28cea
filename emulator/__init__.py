"""The emulator: a server of benchdeck's own that speaks SGLang's HTTP protocol.

This host has no GPU, so ``engine: emulator`` runs this instead of SGLang, and the rest of
the pipeline (runner daemon, processes, the real bench_serving client, DuckDB, pages) runs
for real.  Nothing it produces may pass for a real result: its first log line says so, and
``/server_info`` carries ``"emulated": true``.

Modules:

- :mod:`~emulator.launch`: the command line (``python -m emulator``) and
  start-up/shutdown;
- :mod:`~emulator.flags`: SGLang's flags by exact match against the version's
  schema, plus the ``--emulate-*`` options;
- :mod:`~emulator.config`: resolving flags as SGLang does (auto-sized values);
- :mod:`~emulator.sizing`: model and GPU-memory arithmetic (KV cell, weights,
  ``max_total_num_tokens``), separate from ``domain/plan/memory_fit.py`` on purpose;
- :mod:`~emulator.timing`: step durations (the documented formulas);
- :mod:`~emulator.scheduler`: the continuous-batching scheduler, a pure state
  machine;
- :mod:`~emulator.step_loop`: runs the scheduler in real time under asyncio;
- :mod:`~emulator.predict`: runs it on a virtual clock to predict bench figures;
- :mod:`~emulator.server`, :mod:`~emulator.metrics`,
  :mod:`~emulator.tokens`, :mod:`~emulator.startup`: HTTP endpoints,
  Prometheus metrics, tokenizer, log lines and fatal exits.
"""

from emulator.config import EmulatorConfig, config_from_argv
from emulator.predict import Prediction, predict, rescale_record, steady_state

__all__ = ["EmulatorConfig", "Prediction", "config_from_argv", "predict", "rescale_record", "steady_state"]
