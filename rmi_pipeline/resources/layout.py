"""Where things live: every key in the object store (relative to RMI_STORAGE_URL) and in the sealed eval store
(relative to RMI_EVAL_URL), each defined once. Assets, the CLI, the world, the benches and the tests use these."""

# feedback: a batch file lands in incoming/, its valid events and its quarantine are written beside it
INCOMING = "feedback/incoming"
VALIDATED = "feedback/validated"
QUARANTINE = "feedback/quarantine"


def incoming(batch: str) -> str:
    return f"{INCOMING}/{batch}"


def validated(batch: str) -> str:
    """The batch's valid events, Parquet, with the warehouse's columns."""
    return f"{VALIDATED}/{batch}.parquet"


def validated_summary(batch: str) -> str:
    """The batch's counts (rows in, valid, quarantined, repeated in the batch), which landing checks add up."""
    return f"{VALIDATED}/{batch}.summary.json"


def quarantine(batch: str) -> str:
    """The batch's bad rows, one JSON object a line: row number, reason, the raw input."""
    return f"{QUARANTINE}/{batch}.quarantine.jsonl"


# what training may see of the evals: hashes, counts, the canary
EVAL_MANIFEST = "evals/manifest.json"

# the sealed eval store, which only evaluation assets open
ANCHOR = "anchor/suite.json"  # curated once, frozen: comparable across all cycles
# the anchor's "curated_by" when the simulated world wrote it: `rmi run --fresh` replaces that suite, never another
SIMULATED_CURATORS = "the simulated world's curators"
GROWN = "grown"  # the tiers the suite grew past the anchor's as the champion did, one file per version
REFRESHED = "refreshed"  # a fresh set each cycle: no model can have seen it
MINED = "mined"  # hard cases from feedback, held out by hash
ANSWERS = "answers"  # which eval items each model answered right, so that none is decoded twice
JUDGE_CACHE = "judge/verdicts.json"  # the judge's verdicts by answer hash: the same answer is never judged twice


def grown(version: str) -> str:
    """Every tier grown so far (a version holds its predecessor's items and the tiers it added)."""
    return f"{GROWN}/{version}.json"


def refreshed(version: str) -> str:
    return f"{REFRESHED}/{version}.json"


def mined(version: str) -> str:
    return f"{MINED}/{version}.json"


def answers(model_name: str, version: str, run_id: str) -> str:
    """A registered model's right and wrong answers by eval item (its MLflow run named too: an eval store can be
    shared by loops whose registries number their versions alike)."""
    return f"{ANSWERS}/{model_name}/v{version}-{run_id}.json"


# training data: versioned datasets, and the rows each champion made for its successor
DATASETS = "datasets"
DATASET_LATEST = f"{DATASETS}/latest.json"  # {"version": the newest dataset}
PRACTICE = "practice"
PRACTICE_LATEST = f"{PRACTICE}/latest.json"  # {"champion_version", "rows": the key of its practice rows}


def dataset(version: str) -> str:
    """The folder of one dataset version (its rows and its manifest)."""
    return f"{DATASETS}/{version}"


def dataset_rows(version: str) -> str:
    return f"{dataset(version)}/train.parquet"


def dataset_manifest(version: str) -> str:
    """Rows per source, the feedback batches in it, the eval suite it was checked against."""
    return f"{dataset(version)}/manifest.json"


def practice_rows(champion_version: str, events: int) -> str:
    """What a champion made when the warehouse held `events` events."""
    return f"{PRACTICE}/v{champion_version}-{events}.parquet"


BEST_OF_N_LATEST = f"{PRACTICE}/best-of-n-latest.json"  # {"champion_version", "rows", "reward_model": their keys}


def reward_model(champion_version: str) -> str:
    """The reward model whose picks trained the challenger: the probes score its answers with it too."""
    return f"{PRACTICE}/v{champion_version}-reward-model.pt"


def best_of_n_rows(champion_version: str, events: int) -> str:
    """The champion's sampled answers a reward model picked when the warehouse held `events` events."""
    return f"{PRACTICE}/v{champion_version}-{events}-best-of-n.parquet"


def practice_failed(champion_version: str) -> str:
    """The prompts a champion's coach saw it fail."""
    return f"{PRACTICE}/v{champion_version}-failed.json"


# checkpoints where a training program can read and write them (it never talks to MLflow)
CANDIDATE_CHECKPOINTS = "checkpoints/candidates"
CHAMPION_CHECKPOINTS = "checkpoints/champions"


def candidate_checkpoint(dagster_run_id: str) -> str:
    return f"{CANDIDATE_CHECKPOINTS}/{dagster_run_id}.pt"


def champion_checkpoint(version: str) -> str:
    return f"{CHAMPION_CHECKPOINTS}/v{version}.pt"


# the latest cycle's several challengers, for challenger_selection: {"dagster_run_id", "versions", "variations",
# "mlflow_parent_run_id"}; and the choice among them, for status: ml/selection.Selection's fields, with "winner" its
# version and the "dagster_run_id"
CHALLENGERS_LATEST = "challengers/latest.json"
SELECTION_LATEST = "challengers/selection-latest.json"

# the latest derivative trained for serving: {"version", "champion": the version that taught it}
DERIVATIVE_LATEST = "derivatives/latest.json"

# judgements: the gate's report on a challenger, a canary's live verdict, and each champion's health baseline
EVALUATIONS = "evaluations"


def evaluation(version: str) -> str:
    return f"{EVALUATIONS}/v{version}.json"


def slice_scores(version: str, suite: str) -> str:
    """A model's exact match per slice on one eval suite (its refreshed_version names it): a model answers the same
    items the same way, so it is scored once per suite."""
    return f"{EVALUATIONS}/scores/v{version}-{suite}.json"


def probes(version: str) -> str:
    """The reward-hacking probes' findings on a challenger, with example answers (in the sealed eval store: they
    answer eval items)."""
    return f"probes/v{version}.json"


# how far the judge agrees with people on the answers they rated (what the gate's corrected pass rate uses)
JUDGE_AGREEMENT = "judge/agreement.json"


def canary_verdict(version: str) -> str:
    return f"canary/v{version}.json"


def health_baseline(version: str) -> str:
    return f"health/baseline-v{version}.json"


# serving: each running gateway says it is there, and whom it answers (a canary needs one to get users)
GATEWAYS = "serving/gateways"
HEARTBEAT_SECONDS = 10.0  # how often a gateway says so; a word 3 times as old is from one that is gone


def gateway(name: str) -> str:
    return f"{GATEWAYS}/{name}.json"


# personal data: a deletion (a user's feedback on request, or feedback past RMI_RETENTION_DAYS) is a request first,
# done store by store (privacy/forget.py), then audited without the content; the pending request is removed last
FORGET_PENDING = "privacy/forget/pending"
PRIVACY_AUDIT = "privacy/audit"
AUDIT_KEY = "privacy/audit.key"  # the key of the audit's keyed hash of a user id: it names nobody without it
PROBES = "probes"  # the folder of probes(version), in the sealed eval store


def forget_request(request_id: str) -> str:
    """A deletion not yet complete: whose or which events, who asked, and the steps done so far."""
    return f"{FORGET_PENDING}/{request_id}.json"


def forget_events(request_id: str) -> str:
    """The events a deletion removes, as the warehouse held them before it (their texts find what was made of
    them); removed with the request."""
    return f"{FORGET_PENDING}/{request_id}.events.parquet"


def privacy_audit(request_id: str) -> str:
    """What a completed deletion removed, per store: counts, never the content or the user's id."""
    return f"{PRIVACY_AUDIT}/{request_id}.json"
