"""Where things live in the object store (keys relative to RMI_STORAGE_URL)."""

INCOMING = "feedback/incoming"
VALIDATED = "feedback/validated"
QUARANTINE = "feedback/quarantine"
EVAL_MANIFEST = "evals/manifest.json"  # what training may see of the evals: hashes, counts, the canary

# keys in the sealed eval store (RMI_EVAL_URL), which only evaluation assets open
ANCHOR = "anchor/suite.json"  # curated once, frozen: comparable across all cycles
REFRESHED = "refreshed"  # a fresh set each cycle: no model can have seen it
MINED = "mined"  # hard cases from feedback, held out by hash
DATASETS = "datasets"
PRACTICE = "practice"  # rows the champion made for its successor
PRACTICE_LATEST = "practice/latest.json"
CANDIDATE_CHECKPOINTS = "checkpoints/candidates"  # written by the training program, one per run
CHAMPION_CHECKPOINTS = "checkpoints/champions"  # a champion's weights where a training program can read them
EVALUATIONS = "evaluations"
