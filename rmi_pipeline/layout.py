"""Where things live in the object store (keys relative to RMI_STORAGE_URL)."""

INCOMING = "feedback/incoming"
VALIDATED = "feedback/validated"
QUARANTINE = "feedback/quarantine"
EVAL_SUITE = "evals/private/suite.json"  # curated and sealed: only evaluation assets open it
EVAL_MANIFEST = "evals/manifest.json"  # what training may see: hashes, counts, the canary
DATASETS = "datasets"
EVALUATIONS = "evaluations"
