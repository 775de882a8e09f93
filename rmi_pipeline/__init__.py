"""rmi-pipeline: a recursive model improvement loop on Dagster."""

import os

# Before torch loads its OpenMP in any of our processes: a waiting thread spins briefly, then sleeps. Sleeping at
# once idles a small model's second thread between its short operations; libgomp's long default spin stalls shared
# cores (docs/log.md#2026-12-07-spin). A wait policy or spin count of the user's wins.
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")


def __getattr__(name: str) -> str:
    """`__version__` read when asked for: importlib.metadata costs every process that imports the package 25 ms,
    the training worker's client among them (one per candidate)."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rmi-pipeline")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"
