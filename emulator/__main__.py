import sys

from domain.core.collector import paused_then_frozen

# The emulator's modules load with the collector off and are frozen out of its passes
# (domain/core/collector.py): a full collection during a run would otherwise scan them all,
# a pause of the event loop that runs the step loop, which then falls behind the model.
with paused_then_frozen():
    from emulator.launch import main

sys.exit(main())
