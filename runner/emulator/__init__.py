"""The emulator engine: a server of benchdeck's own that speaks SGLang's HTTP protocol.

This host has no GPU, so ``engine: emulator`` runs this instead of SGLang, and the rest of
the pipeline (runner daemon, processes, the real bench_serving client, DuckDB, pages) runs
for real.  Nothing it produces may pass for a real result: its first log line says so, and
``/server_info`` carries ``"emulated": true``.

Modules:

- :mod:`~runner.emulator.launch`: the command line (``python -m runner.emulator``) and
  start-up/shutdown;
- :mod:`~runner.emulator.flags`: SGLang's flags by exact match against the version's
  schema, plus the ``--emulate-*`` options;
- :mod:`~runner.emulator.config`: resolving flags as SGLang does (auto-sized values);
- :mod:`~runner.emulator.sizing`: model and GPU-memory arithmetic (KV cell, weights,
  ``max_total_num_tokens``), separate from ``domain/memory_fit.py`` on purpose;
- :mod:`~runner.emulator.timing`: step durations (the documented formulas);
- :mod:`~runner.emulator.scheduler`: the continuous-batching scheduler, a pure state
  machine;
- :mod:`~runner.emulator.engine`: runs the scheduler in real time under asyncio;
- :mod:`~runner.emulator.predict`: runs it on a virtual clock to predict bench figures;
- :mod:`~runner.emulator.server`, :mod:`~runner.emulator.metrics`,
  :mod:`~runner.emulator.tokens`, :mod:`~runner.emulator.startup`: HTTP endpoints,
  Prometheus metrics, tokenizer, log lines and fatal exits.
"""

from runner.emulator.config import EmulatorConfig, config_from_argv
from runner.emulator.predict import Prediction, predict, rescale_record, steady_state

__all__ = ["EmulatorConfig", "Prediction", "config_from_argv", "predict", "rescale_record", "steady_state"]
