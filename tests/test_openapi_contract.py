"""The gateway's OpenAPI document is its contract: schemathesis generates requests from it (valid ones, and ones
the document excludes) against `rmi serve` on 127.0.0.1, and every reply must be one the document describes (its
status, content type and body schema), no request may fail the server, and what the document excludes must be
refused. A bounded number of examples per route, as schemathesis' CLI runs them (examples, coverage of each
field's edges, then fuzzing): a check of the contract, not a search."""

import schemathesis
from gateway import gateway_in_thread, untrained_home
from schemathesis.engine import Status, events

from rmi_pipeline.serving.process import wait_ready

CONFIG = {
    "generation": {"max-examples": 6},
    "seed": 0,  # the same requests every run: a failure found is a failure again
    "phases": {"stateful": {"enabled": False}},  # no links between routes to follow
    # 400 and 413 refuse well-formed requests past a limit (n times the prompts, a text's length, the prompts in a
    # request) or with an option the gateway cannot honour: each route documents them for that
    "checks": {"positive_data_acceptance": {"expected-statuses": ["2xx", "3xx", "400", "401", "403", "404", "409",
                                                                 "413", "429", "5xx"]}},
}


def test_every_reply_is_one_the_openapi_document_describes(tmp_path):
    settings, _ = untrained_home(tmp_path / "home")
    with gateway_in_thread(settings) as url:
        wait_ready(url, "1")
        schema = schemathesis.openapi.from_url(f"{url}/openapi.json",
                                               config=schemathesis.config.SchemathesisConfig.from_dict(CONFIG))
        found, cases = [], 0
        for event in schemathesis.engine.from_schema(schema).execute():
            if isinstance(event, events.ScenarioFinished):
                cases += len(event.recorder.cases)
                found += [failure(event.recorder, case_id, check.failure_info)
                          for case_id, checks in event.recorder.checks.items() for check in checks
                          if check.status == Status.FAILURE and check.failure_info]
            elif isinstance(event, events.NonFatalError):
                found.append(f"{event.label}: {event.info.format()}")
            elif isinstance(event, events.FatalError):
                found.append(f"schemathesis failed: {event.exception!r}")
    assert cases > 100
    assert not found, "\n".join(dict.fromkeys(found))


def failure(recorder, case_id: str, info) -> str:
    """What failed, with the reply that failed it and the request that got it (as curl)."""
    interaction = recorder.interactions.get(case_id)
    reply = interaction.response if interaction else None
    got = f"{reply.status_code} {reply.content[:300]!r}" if reply else "no reply"
    return f"{recorder.label}: {info.failure.title}: {info.failure.message[:300]}\n  got {got}\n  {info.code_sample}"
