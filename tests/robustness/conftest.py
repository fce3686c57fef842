"""Hypothesis profiles for the random-graph fuzzing in test_fuzz.py.

    fuzz-ci    (default here) a fixed, derandomized set of examples per test: fast and repeatable
    fuzz-long  2,500 random examples per test, 12,500 graphs over the five tests:
               .venv/bin/python -m pytest tests/robustness/test_fuzz.py -n 2 --hypothesis-profile=fuzz-long
"""

from hypothesis import HealthCheck, settings

_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
               print_blob=True)
settings.register_profile("fuzz-ci", max_examples=25, derandomize=True, database=None, **_COMMON)
settings.register_profile("fuzz-long", max_examples=2500, **_COMMON)
