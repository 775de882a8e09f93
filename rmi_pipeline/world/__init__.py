"""A simulated production world: users, curators and a serving process. The pipeline never imports this."""

from .world import World

__all__ = ["World"]
