"""Graded scores: how an answer is scored against an eval item (exact ... a judge model), and how far a judge's
verdicts can be trusted (its agreement with people, and a pass rate corrected for its errors). No Dagster import."""
