"""Reading the repository's own YAML data files (the UI catalogue, the flag data, the
estimator's calibration): libyaml's safe loader where PyYAML was built with it, else the
pure-Python one.  Both build the same objects (plain mappings, lists, scalars); libyaml is
about ten times faster, which is the app's first visit after a start (the catalogue alone
took 0.22 s).  YAML a user supplies (a plan, a form field) keeps ``yaml.safe_load``, whose
error messages the pages show."""

from __future__ import annotations

from typing import Any

import yaml

_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_data_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_LOADER)  # noqa: S506 - a safe loader (C or Python)
