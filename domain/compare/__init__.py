"""Runs side by side: the comparability key and checklist, one comparison (a baseline and
its runs) with the frames the compare page and the exports read, and the caveat every
export of a comparison carries."""
