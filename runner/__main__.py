import sys

from domain.core.collector import paused_then_frozen

# The CLI's modules (DuckDB, pandas, the domain) load with the collector off and are frozen
# out of its passes (domain/core/collector.py): a CLI call spends less of its CPU on
# imports, and a long-lived runner's full collections skip what lives as long as it does.
with paused_then_frozen():
    # The doctor is dispatched before the CLI's imports (DuckDB, pandas): see runner/doctor_cmd.py.
    _words = [w for w in sys.argv[1:] if not w.startswith("--lang")]
    if sys.argv[1:2] == ["--lang"]:
        _words = sys.argv[3:]
    if _words[:1] == ["doctor"]:
        from runner.doctor_cmd import main
    else:
        from runner.cli import main

sys.exit(main())
