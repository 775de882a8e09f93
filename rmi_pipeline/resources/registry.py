"""The one place that talks to MLflow: runs, checkpoints, model versions and the champion/challenger/canary/fast
aliases.

Promotion is a single alias move, so a failed gate, run or crash can never leave the champion half-moved; the
champion's history is reconciled with the alias whenever it is read.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from contextlib import closing, contextmanager, suppress
from pathlib import Path

from dagster import ConfigurableResource

CHAMPION, CHALLENGER, CANARY = "champion", "challenger", "canary"
FAST = "fast"  # the champion's smaller, faster derivative (RMI_DERIVATIVE_SIZE), served with RMI_SERVE_MODEL=fast
CANARY_FOR = "canary_for"  # model version tag: the alias a canary is on trial to take (champion when absent)
MODEL = "model"  # the run's artifact folder that holds the MLflow model a version is made from
HISTORY = "champion_history"  # registered-model tag: the versions that have been champion, oldest first


class ModelRegistry(ConfigurableResource):
    tracking_uri: str
    artifact_root: str | None = None  # None: a tracking server keeps artifacts where its --artifacts-destination says
    model_name: str
    experiment: str = "rmi-improvement-cycles"
    cache_dir: str | None = None  # Settings.cache_dir: where an empty MLflow database is kept for new homes

    def client(self):
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        logging.getLogger("alembic").setLevel(logging.WARNING)
        logging.getLogger("mlflow").setLevel(logging.WARNING)
        from mlflow import MlflowClient

        if self.cache_dir and self.tracking_uri.startswith("sqlite:///"):
            _new_database(Path(self.tracking_uri.removeprefix("sqlite:///")), Path(self.cache_dir).expanduser())
        return MlflowClient(tracking_uri=self.tracking_uri, registry_uri=self.tracking_uri)

    def _experiment_id(self, client) -> str:
        exp = client.get_experiment_by_name(self.experiment)
        if exp is not None:
            return exp.experiment_id
        if self.artifact_root and self.artifact_root.startswith("file://"):
            Path(self.artifact_root.removeprefix("file://")).mkdir(parents=True, exist_ok=True)
        return client.create_experiment(self.experiment, artifact_location=self.artifact_root)

    @contextmanager
    def run(self, name: str, tags: dict[str, str], parent: str | None = None):
        """An MLflow run (nested under the run `parent`, as the MLflow UI groups them) that ends FAILED if the body
        raises."""
        run_id = self.open_run(name, tags, parent)
        try:
            yield run_id
        except BaseException:
            self.close_run(run_id, "FAILED")
            raise
        self.close_run(run_id)

    def open_run(self, name: str, tags: dict[str, str], parent: str | None = None) -> str:
        """A new MLflow run's id, left running (a parent run spans the steps that train its children)."""
        client = self.client()
        tags = {**tags, **({"mlflow.parentRunId": parent} if parent else {})}
        return client.create_run(self._experiment_id(client), run_name=name, tags=tags).info.run_id

    def close_run(self, run_id: str, status: str = "FINISHED", tags: dict[str, str] | None = None) -> None:
        client = self.client()
        for key, value in (tags or {}).items():
            client.set_tag(run_id, key, value)
        client.set_terminated(run_id, status)

    def end_runs_of(self, dagster_run_id: str, status: str) -> int:
        """End the MLflow runs still RUNNING that a Dagster run started (its process died); returns how many."""
        client = self.client()
        experiment = client.get_experiment_by_name(self.experiment)
        if experiment is None:
            return 0
        runs = client.search_runs([experiment.experiment_id], filter_string=f"tags.dagster_run_id = '{dagster_run_id}' "
                                  "and attributes.status = 'RUNNING'")
        for run in runs:
            client.set_terminated(run.info.run_id, status)
        return len(runs)

    def version(self, alias: str):
        """The model version behind an alias, or None."""
        from mlflow.exceptions import MlflowException

        client = self.client()
        try:
            return client.get_model_version_by_alias(self.model_name, alias)
        except MlflowException:
            return None

    def candidates_since(self, version: str | int) -> int:
        """Versions registered after `version`: candidates the gate turned down while it stayed champion."""
        return sum(int(mv.version) > int(version)
                   for mv in self.client().search_model_versions(f"name='{self.model_name}'"))

    def log_training(self, run_id: str, params: dict, metrics: dict, curve: list[dict]) -> None:
        """A candidate's parameters, final metrics and loss curve ({"train_loss", "step", "timestamp_ms"} points,
        as the run's train_loss metric at their steps and times)."""
        import time

        from mlflow.entities import Metric, Param

        client, now = self.client(), int(time.time() * 1000)
        client.log_batch(run_id, params=[Param(k, str(v)) for k, v in params.items()],
                         metrics=[Metric(k, v, now, 0) for k, v in metrics.items()])
        points = [Metric("train_loss", p["train_loss"], p["timestamp_ms"], p["step"]) for p in curve]
        for start in range(0, len(points), 1000):  # MLflow takes at most 1000 metrics per batch
            client.log_batch(run_id, metrics=points[start:start + 1000])

    def log_dataset(self, run_id: str, uri: str, version: str) -> None:
        """The training dataset as the run's input (MLflow's Datasets panel): its version, where it lies, its digest
        (the version's hash)."""
        import warnings

        from mlflow.data.dataset_source_registry import resolve_dataset_source
        from mlflow.data.meta_dataset import MetaDataset
        from mlflow.entities import DatasetInput, InputTag

        with warnings.catch_warnings():  # a file:// URI reads as two kinds of local source, the same one
            warnings.simplefilter("ignore", UserWarning)
            source = resolve_dataset_source(uri)
        from mlflow.exceptions import MlflowException
        from sqlalchemy.exc import IntegrityError

        dataset = MetaDataset(source, name=version, digest=version.rsplit("-", 1)[-1][:36])
        given = [DatasetInput(dataset._to_mlflow_entity(), tags=[InputTag("mlflow.data.context", "training")])]
        try:
            self.client().log_inputs(run_id, datasets=given)
        except MlflowException as exc:  # a cycle's challengers log one dataset at once: MLflow looks, then inserts,
            if not isinstance(exc.__cause__ or exc.__context__, IntegrityError):  # and the later insert loses
                raise
            self.client().log_inputs(run_id, datasets=given)  # the other's row is there now: logged against it

    def log_evaluation(self, version: str | int, metrics: dict[str, float], verdict: str | None = None) -> None:
        """The gate's results as metrics of the run that made `version` (plotted beside its training loss), and its
        verdict in the version's description (None: metrics only)."""
        import time

        from mlflow.entities import Metric

        client, now = self.client(), int(time.time() * 1000)
        mv = client.get_model_version(self.model_name, str(version))
        points = [Metric(k, float(v), now, 0) for k, v in metrics.items()]
        for start in range(0, len(points), 1000):
            client.log_batch(mv.run_id, metrics=points[start:start + 1000])
        if verdict is None:
            return
        described = (mv.description or "").split(" Gate: ")[0]
        client.update_model_version(self.model_name, str(version), description=f"{described} Gate: {verdict}"[:5000])

    def register_model(self, run_id: str, checkpoint: bytes, recipe: str, tags: dict[str, str],
                       alias: str | None = CHALLENGER):
        """Log a checkpoint (Recipe.checkpoint's bytes) as the run's MLflow model (a pyfunc any MLflow client
        loads), create a model version from it and point `alias` at it (None: no alias)."""
        from ..recipes import pyfunc

        client = self.client()
        with tempfile.TemporaryDirectory() as tmp:
            pyfunc.save(Path(tmp) / MODEL, recipe, checkpoint)
            client.log_artifacts(run_id, str(Path(tmp) / MODEL), artifact_path=MODEL)
        try:
            client.get_registered_model(self.model_name)
        except Exception:
            client.create_registered_model(self.model_name, description=(
                "Champion and candidates of the rmi-pipeline loop: each version is a pyfunc model (prompts in, "
                "completions out); @champion serves users, @challenger is the latest candidate."))
        mv = client.create_model_version(
            self.model_name, source=f"{client.get_run(run_id).info.artifact_uri}/{MODEL}", run_id=run_id,
            tags={k: str(v) for k, v in tags.items()},
            description=f"A {recipe.rsplit(':', 1)[-1]} candidate trained on dataset "
                        f"{tags.get('dataset_version', '?')}; load it with mlflow.pyfunc.load_model.")
        if alias:
            client.set_registered_model_alias(self.model_name, alias, mv.version)
        return mv

    def checkpoint(self, reference: str | int) -> tuple[str, bytes]:
        """(version, checkpoint bytes) behind 'champion', 'challenger' or a version number."""
        import mlflow

        client = self.client()
        if str(reference).isdigit():
            version = str(reference)
        else:
            mv = self.version(str(reference))
            if mv is None:
                raise LookupError(f"model {self.model_name!r} has no version with alias {reference!r}")
            version = mv.version
        source = client.get_model_version_download_uri(self.model_name, version)
        if not source.endswith(".pt"):  # an MLflow model; versions registered before it were a bare file
            from ..recipes import pyfunc

            source = f"{source}/{pyfunc.DATA}/{pyfunc.CHECKPOINT_FILE}"
        with tempfile.TemporaryDirectory() as tmp:
            # mlflow-artifacts:/ sources (a tracking server) resolve against our URI, not MLflow's global one
            file = mlflow.artifacts.download_artifacts(artifact_uri=source, dst_path=tmp,
                                                       tracking_uri=self.tracking_uri)
            return version, Path(file).read_bytes()

    def load(self, reference: str | int, recipe):
        """A ready model, the way a serving process loads it: by alias from the registry, rebuilt by its recipe."""
        return recipe.load_model(self.checkpoint(reference)[1])

    def champion_history(self) -> list[str]:
        """Versions that have been champion, oldest first, ending with the champion now.

        The alias is the truth; the `champion_history` tag is written before each alias move and read up to the
        alias's last entry, so a promotion or rollback killed between its writes leaves a whole history."""
        current = self.version(CHAMPION)
        if current is None:  # no champion yet (or no model at all)
            return []
        written = self.client().get_registered_model(self.model_name).tags.get(HISTORY, "")
        history = written.split(",") if written else []
        now = str(current.version)
        if now not in history:  # the alias was moved by hand, outside the loop
            return history + [now]
        return history[:len(history) - history[::-1].index(now)]

    def tags_of(self, version: str | int) -> dict[str, str]:
        """A version's tags; a LookupError for a version that does not exist."""
        from mlflow.exceptions import MlflowException

        try:
            return dict(self.client().get_model_version(self.model_name, str(version)).tags)
        except MlflowException:
            raise LookupError(f"model {self.model_name!r} has no version {version}") from None

    def promote(self, version: str | int, tags: dict[str, str]) -> str | None:
        """Move `champion` to `version`; returns the version it left. The history is written first, the alias moved
        in one write, then the version is tagged as promoted: a kill at any point leaves a consistent state."""
        self.tags_of(version)  # a version that does not exist: LookupError, before anything moves
        client = self.client()
        history = self.champion_history()
        if history[-1:] == [str(version)]:  # already champion: a promotion that died after its alias write
            previous = history[-2] if len(history) > 1 else None
        else:
            previous = history[-1] if history else None
            self._write_history(history + [str(version)])
            client.set_registered_model_alias(self.model_name, CHAMPION, str(version))
        self.tag(version, {**tags, "previous_champion": previous or "none"})
        return previous

    def rollback(self, tags: dict[str, str]) -> tuple[str, str]:
        """Move `champion` back to the version that held it before; returns (from, to)."""
        client = self.client()
        history = self.champion_history()
        if len(history) < 2:
            raise LookupError("there is no earlier champion to roll back to")
        current, back = history[-1], history[-2]
        client.set_registered_model_alias(self.model_name, CHAMPION, back)  # the history then reads up to `back`
        self._write_history(history[:-1])
        self.tag(back, tags)
        return current, back

    def point(self, alias: str, version: str | int, tags: dict[str, str]) -> str | None:
        """Move an alias other than `champion` (such as `fast`) to `version` in one write, then tag the version;
        returns the version it left (None: it named none, or this one already). The champion moves by `promote`,
        which keeps its history."""
        if alias == CHAMPION:
            raise ValueError("the champion moves by promote, which keeps its history")
        self.tags_of(version)  # a version that does not exist: LookupError, before anything moves
        current = self.version(alias)
        previous = str(current.version) if current is not None else None
        if previous == str(version):
            previous = None
        else:
            self.client().set_registered_model_alias(self.model_name, alias, str(version))
        self.tag(version, tags)
        return previous

    def start_canary(self, version: str | int, tags: dict[str, str], for_alias: str = CHAMPION) -> None:
        """Point `canary` at a version that passed its gate, on trial to take `for_alias` (its CANARY_FOR tag): the
        gateways of that alias send a share of users to it."""
        client = self.client()
        self.tag(version, {**tags, CANARY_FOR: for_alias})
        client.set_registered_model_alias(self.model_name, CANARY, str(version))

    def end_canary(self, tags: dict[str, str]) -> str | None:
        """Remove `canary` (all users back on the champion); returns the version it named, tagged with `tags`."""
        current = self.version(CANARY)
        if current is None:
            return None
        self.client().delete_registered_model_alias(self.model_name, CANARY)
        self.tag(current.version, tags)
        return str(current.version)

    def _write_history(self, history: list[str]) -> None:
        self.client().set_registered_model_tag(self.model_name, HISTORY, ",".join(history[-200:]))

    def tag(self, version: str | int, tags: dict[str, str]) -> None:
        client = self.client()
        for key, value in tags.items():
            client.set_model_version_tag(self.model_name, str(version), key, str(value))


def _new_database(path: Path, cache: Path) -> None:
    """A new home's MLflow database is a copy of an empty one kept in `cache`, made once per MLflow version: MLflow
    makes a database by running every schema migration it has, 2.2 s of CPU for each home."""
    if path.exists():
        return
    import sqlite3

    import mlflow

    empty = cache / f"mlflow-{mlflow.__version__}.db"
    if not empty.exists():
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache) as folder:
            made = Path(folder) / "empty.db"
            mlflow.MlflowClient(tracking_uri=f"sqlite:///{made}").search_experiments()
            os.replace(made, empty)  # whole or not at all, should another process make one too
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as folder:
        copy = Path(folder) / path.name
        shutil.copyfile(empty, copy)
        with closing(sqlite3.connect(copy)) as db, db:  # where MLflow puts the Default experiment
            db.execute("UPDATE experiments SET artifact_location = ? WHERE experiment_id = 0",
                       (str(Path.cwd() / "mlruns" / "0"),))
        with suppress(FileExistsError):  # another process's copy came first: it is as good
            os.link(copy, path)
