"""rmi-pipeline: a recursive model improvement loop on Dagster."""


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
