"""The estimator: step times (``step_time``), sizing (``sizing``), the serving model
(``estimator``), its fitted constants (``constants``, ``calibration.yaml``) and the fit
itself (``calibrate``).  The emulator runs the same step-time model."""
