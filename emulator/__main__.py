import gc
import sys

# The collector is off while the emulator imports its modules, then everything they made is
# frozen out of its passes: a full collection during a run would otherwise scan them all,
# a pause of the event loop that runs the step loop, which then falls behind the model.
gc.disable()
from emulator.launch import main  # noqa: E402 - imported with the collector off, above

gc.enable()
gc.freeze()

sys.exit(main())
