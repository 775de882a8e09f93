"""Dagster's own GraphQL API, as the web UI uses it: launch and stop runs, pause and resume the automation.

Runs launched here go through the run queue and the daemon like any other (not "Manually launched" in process),
and are stopped with the UI's Terminate; sensors and schedules are switched with the same mutations as the UI's
toggles, so the UI shows who is off.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..automation import ALWAYS_ON

_WORKSPACE = """{ workspaceOrError { __typename ... on PythonError { message }
  ... on Workspace { locationEntries { name locationOrLoadError { __typename
    ... on RepositoryLocation { repositories { name
      sensors { id name sensorState { status } } schedules { id name scheduleState { status } } } }
    ... on PythonError { message } } } } } }"""
_LAUNCH = """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) { __typename
  ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
  ... on RunConfigValidationInvalid { errors { message } } ... on InvalidSubsetError { message } } }"""
_RUNS = """query($filter: RunsFilter) { runsOrError(filter: $filter) { __typename
  ... on Runs { results { runId status } } ... on PythonError { message }
  ... on InvalidPipelineRunsFilterError { message } } }"""
_TERMINATE = """mutation($runId: String!) { terminateRun(runId: $runId) { __typename
  ... on TerminateRunFailure { message } ... on RunNotFoundError { message } ... on UnauthorizedError { message }
  ... on PythonError { message } } }"""
_START_SENSOR = """mutation($s: SensorSelector!) { startSensor(sensorSelector: $s) { __typename
  ... on PythonError { message } } }"""
_STOP_SENSOR = """mutation($id: String) { stopSensor(id: $id) { __typename ... on PythonError { message } } }"""
_START_SCHEDULE = """mutation($s: ScheduleSelector!) { startSchedule(scheduleSelector: $s) { __typename
  ... on PythonError { message } } }"""
_STOP_SCHEDULE = """mutation($id: String) { stopRunningSchedule(id: $id) { __typename
  ... on PythonError { message } } }"""

PAUSE_ROUNDS, PAUSE_SETTLE_SECONDS = 5, 1.0  # a stop is read back this long after, up to this many times


class DagsterUnreachable(ConnectionError):
    """The webserver did not answer (or answered an error): nothing was changed."""


@dataclass(frozen=True)
class Instigator:
    """A sensor or a schedule of the code location."""

    kind: str  # "sensor" or "schedule"
    id: str
    name: str
    running: bool


class DagsterAPI:
    def __init__(self, ui_url: str, timeout: float = 10.0):
        self.url, self.timeout = ui_url.rstrip("/"), timeout

    def run_link(self, run_id: str) -> str:
        return f"{self.url}/runs/{run_id}"

    def launch(self, job: str, run_config: dict, tags: dict[str, str]) -> str:
        """Queue a run of `job`; returns its id."""
        location, repository = self._repository()
        reply = self._query(_LAUNCH, {"params": {
            "selector": {"repositoryLocationName": location, "repositoryName": repository, "jobName": job},
            "runConfigData": run_config,
            "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in tags.items()]}}})["launchRun"]
        if reply["__typename"] != "LaunchRunSuccess":
            errors = reply.get("errors") or [reply]
            raise RuntimeError(f"Dagster did not launch {job}: {'; '.join(e.get('message', '?') for e in errors)}")
        return reply["run"]["runId"]

    def runs(self, job: str, tags: dict[str, str], statuses: list[str]) -> list[tuple[str, str]]:
        """(run id, status) of the runs of `job` with `tags` whose status is one of `statuses`, newest first."""
        reply = self._query(_RUNS, {"filter": {
            "pipelineName": job, "tags": [{"key": k, "value": v} for k, v in tags.items()],
            "statuses": statuses}})["runsOrError"]
        if reply["__typename"] != "Runs":
            raise RuntimeError(f"Dagster did not list the runs of {job}: {reply.get('message', '?')}")
        return [(r["runId"], r["status"]) for r in reply["results"]]

    def terminate(self, run_id: str) -> None:
        """Stop a run: a queued one never starts, a running one's process is interrupted (the UI's Terminate)."""
        reply = self._query(_TERMINATE, {"runId": run_id})["terminateRun"]
        if reply["__typename"] != "TerminateRunSuccess":
            raise RuntimeError(f"Dagster did not stop run {run_id[:8]}: {reply.get('message', reply['__typename'])}")

    def automation(self) -> list[Instigator]:
        """Every sensor and schedule that turns the loop (alerts and the dead-run sensor always stay on)."""
        return [i for i in self._instigators() if i.name not in ALWAYS_ON]

    def pause(self) -> list[str]:
        """Stop every running sensor and schedule of the loop; returns the names stopped.

        Stops again what reads running a moment later: the sensor daemon writes back the state it read as its
        iteration began when it marks a tick, which can undo a stop made in between.
        """
        stopped: list[str] = []
        for _ in range(PAUSE_ROUNDS):
            running = [item for item in self.automation() if item.running]
            if not running and stopped:
                return stopped
            for item in running:
                query = _STOP_SENSOR if item.kind == "sensor" else _STOP_SCHEDULE
                self._expect(self._query(query, {"id": item.id}), item)
                stopped += [item.name] if item.name not in stopped else []
            if not stopped:
                return stopped
            time.sleep(PAUSE_SETTLE_SECONDS)
        still = [item.name for item in self.automation() if item.running]
        if still:
            raise RuntimeError(f"Dagster's daemon kept {', '.join(still)} running after {PAUSE_ROUNDS} stops")
        return stopped

    def resume(self) -> list[str]:
        """Start every stopped sensor and schedule of the loop; returns the names started."""
        location, repository = self._repository()
        started = []
        for item in self.automation():
            if not item.running:
                where = {"repositoryLocationName": location, "repositoryName": repository}
                if item.kind == "sensor":
                    reply = self._query(_START_SENSOR, {"s": {**where, "sensorName": item.name}})
                else:
                    reply = self._query(_START_SCHEDULE, {"s": {**where, "scheduleName": item.name}})
                self._expect(reply, item)
                started.append(item.name)
        return started

    def _instigators(self) -> list[Instigator]:
        repo = self._repositories()[0][2]
        return ([Instigator("sensor", s["id"], s["name"], s["sensorState"]["status"] == "RUNNING")
                 for s in repo["sensors"]]
                + [Instigator("schedule", s["id"], s["name"], s["scheduleState"]["status"] == "RUNNING")
                   for s in repo["schedules"]])

    def _repository(self) -> tuple[str, str]:
        location, name, _ = self._repositories()[0]
        return location, name

    def _repositories(self) -> list[tuple[str, str, dict]]:
        workspace = self._query(_WORKSPACE, {})["workspaceOrError"]
        if workspace["__typename"] != "Workspace":
            raise DagsterUnreachable(f"Dagster's workspace did not load: {workspace.get('message', '?')}")
        found = [(entry["name"], repo["name"], repo) for entry in workspace["locationEntries"]
                 if entry["locationOrLoadError"]["__typename"] == "RepositoryLocation"
                 for repo in entry["locationOrLoadError"]["repositories"]]
        if not found:
            raise DagsterUnreachable("Dagster has no loaded code location (see the UI's Deployment page)")
        return found

    def _query(self, query: str, variables: dict) -> dict:
        import httpx

        try:
            reply = httpx.post(f"{self.url}/graphql", json={"query": query, "variables": variables},
                               timeout=self.timeout)
            reply.raise_for_status()
        except httpx.HTTPError as exc:
            raise DagsterUnreachable(f"the Dagster webserver at {self.url} did not answer ({type(exc).__name__}); "
                                     "is `rmi ui` running?") from None
        body = reply.json()
        if body.get("errors"):
            raise RuntimeError(f"Dagster refused the request: {body['errors'][0].get('message', '?')}")
        return body["data"]

    @staticmethod
    def _expect(reply: dict, item: Instigator) -> None:
        result = next(iter(reply.values()))
        if result["__typename"] == "PythonError":
            raise RuntimeError(f"Dagster could not switch {item.kind} {item.name}: {result['message']}")
