"""The promotion gate: is the challenger better overall, and no slice worse than its tolerance?"""

from __future__ import annotations

from dataclasses import asdict, dataclass

Slice = tuple[str, int]


@dataclass
class Decision:
    promote: bool
    reason: str
    challenger_mean: float
    champion_mean: float | None
    gain: float | None
    worst_slice: str | None = None
    worst_delta: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def mean(scores: dict[Slice, float], private: set[Slice]) -> float:
    return sum(scores[s] for s in private) / len(private)


def decide(challenger: dict[Slice, float], champion: dict[Slice, float] | None, private: set[Slice], *,
           min_gain: float, slice_tolerance: float, first_floor: float) -> Decision:
    """Scores are exact-match rates per (skill, tier); only private slices count."""
    if not private:
        raise ValueError("the eval suite has no private slice: nothing honest to gate on")
    new = mean(challenger, private)
    if champion is None:
        ok = new >= first_floor
        why = (f"no champion yet; the first model scores {new:.3f}, "
               f"{'at or above' if ok else 'below'} the floor {first_floor:.3f}")
        return Decision(ok, why, new, None, None)
    old = mean(champion, private)
    gain = new - old
    deltas = {s: challenger[s] - champion[s] for s in private}
    worst = min(deltas, key=deltas.get)
    worst_name = f"{worst[0]}/{worst[1]}"
    if gain <= min_gain:
        return Decision(False, f"not better overall: {new:.3f} vs champion {old:.3f} (gain {gain:+.3f} "
                        f"must exceed {min_gain:+.3f})", new, old, gain, worst_name, deltas[worst])
    if deltas[worst] < -slice_tolerance:
        return Decision(False, f"better overall ({gain:+.3f}) but slice {worst_name} falls {deltas[worst]:+.3f}, "
                        f"past the tolerance {slice_tolerance:.3f}", new, old, gain, worst_name, deltas[worst])
    return Decision(True, f"better overall: {new:.3f} vs {old:.3f} ({gain:+.3f}); worst slice {worst_name} "
                    f"{deltas[worst]:+.3f} is within the tolerance {slice_tolerance:.3f}",
                    new, old, gain, worst_name, deltas[worst])
