"""benchdeck's benchmark suite: ``make bench`` (``python -m bench``) prints its figures."""
