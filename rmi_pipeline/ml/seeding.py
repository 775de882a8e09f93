"""The seed of a turn of the loop: the same seed and champion give the same turn, and a retry gives a new one."""


def turn_seed(seed: int, champion_version: str | int, candidates_since: int) -> int:
    """The seed of a turn from `champion_version` (0: no champion yet). After `candidates_since` candidates the
    gate turned down while it stayed champion, a turn with nothing new to learn from tries something new."""
    return seed + int(champion_version) + 1000 * candidates_since
