"""A simulated production world: users, curators and a serving process. The pipeline never imports this:
`rmi run` and `rmi simulate` start it as a program of its own (`python -m rmi_pipeline.world`)."""

from .world import World

__all__ = ["World"]
