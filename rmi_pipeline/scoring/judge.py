"""The judge: a scorer that asks any OpenAI-compatible chat endpoint (RMI_JUDGE_URL, RMI_JUDGE_MODEL) to grade an
answer pass or fail on each criterion of a rubric. An answer scores 1.0 only when every criterion passes: binary
verdicts per criterion are what a gate can trust and calibrate.

One chat completion per answer, at temperature 0, asking for JSON: the user message holds the sections
`## Question`, `## Reference answer` (or "(none)"), `## Answer to grade` and `## Criteria` (`- name: text` lines);
the reply must be `{"verdicts": [{"criterion": name, "pass": true|false, "reason": text}, ...]}` with one verdict
per criterion. A timeout, an HTTP error or a bad reply is retried up to RMI_JUDGE_RETRIES times, then a JudgeError
says what was wrong. Answers are cached by a hash of (model, criteria, input, target, output), so scoring the same
answer again costs no call. The key is sent as a bearer token and appears in no repr, log or error.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

from .contract import Scorer, ScoreRequest, ScorerError

SYSTEM = ("You grade an answer to a question against a rubric. For each criterion, decide whether the answer passes "
          "(true) or fails (false), judging only what the criterion says; use the reference answer where one is "
          "given. Reply with JSON only, no other text, in this shape: "
          '{"verdicts": [{"criterion": "<name>", "pass": true, "reason": "<one sentence>"}]}, '
          "with exactly one verdict for each criterion, named as in the rubric.")


GIVE_UP = 10  # answers failing every attempt, after which a batch stops asking


class JudgeError(RuntimeError):
    """The judge gave no usable verdict for an item after every retry; the message says what was wrong."""


@dataclass
class JudgeUsage:
    """What the judge has cost so far: calls sent (retries included), answers served from the cache, retries,
    items that failed every attempt, tokens, cost from the prices per million tokens, seconds spent in calls."""

    calls: int = 0
    cached: int = 0
    retries: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    seconds: float = 0.0


def parse_criteria(criteria: Iterable[str]) -> list[tuple[str, str]]:
    """'name: what passing means' lines as (name, text) pairs; a nameless or repeated one is an error naming it,
    since the judge's verdicts are matched to criteria by name."""
    parsed: list[tuple[str, str]] = []
    for line in criteria:
        name, colon, text = line.partition(":")
        name, text = name.strip(), text.strip()
        if not colon or not name or not text:
            raise ScorerError(f"RMI_JUDGE_CRITERIA: {line!r} is not 'name: what passing means'")
        if any(name == seen for seen, _ in parsed):
            raise ScorerError(f"RMI_JUDGE_CRITERIA names the criterion {name!r} twice")
        parsed.append((name, text))
    if not parsed:
        raise ScorerError("RMI_JUDGE_CRITERIA is empty: the judge needs at least one criterion")
    return parsed


def grading_prompt(input: str, output: str, target: str | None, criteria: list[tuple[str, str]]) -> str:
    """The user message, in the sections the protocol fixes (the world's judge parses them)."""
    rubric = "\n".join(f"- {name}: {text}" for name, text in criteria)
    return (f"## Question\n{input}\n## Reference answer\n{'(none)' if target is None else target}\n"
            f"## Answer to grade\n{output}\n## Criteria\n{rubric}")


class BadAnswer(Exception):
    """One attempt's failure, in words for the JudgeError (never holding the key)."""

    def __init__(self, reason: str, retry: bool = True):
        super().__init__(reason)
        self.retry = retry


def read_verdicts(content: str | None, criteria: list[tuple[str, str]]) -> list[dict]:
    """The reply's verdicts in the rubric's order, or BadAnswer saying what is wrong: not JSON, a criterion
    missing, a "pass" that is not a boolean (2, "yes": out of range)."""
    try:
        reply = json.loads(content or "")
    except json.JSONDecodeError:
        raise BadAnswer(f"the reply is not JSON: {(content or '')[:80]!r}") from None
    if not isinstance(reply, dict) or not isinstance(reply.get("verdicts"), list):
        raise BadAnswer('the reply is JSON but not {"verdicts": [...]}')
    by_name = {}
    for verdict in reply["verdicts"]:
        if isinstance(verdict, dict) and isinstance(verdict.get("criterion"), str):
            by_name.setdefault(verdict["criterion"].strip(), verdict)
    verdicts = []
    for name, _ in criteria:
        verdict = by_name.get(name)
        if verdict is None:
            raise BadAnswer(f"the reply has no verdict for criterion {name!r} (criterion missing)")
        if not isinstance(verdict.get("pass"), bool):
            raise BadAnswer(f"the reply's pass for criterion {name!r} is {verdict.get('pass')!r}, not a boolean "
                            "(out of range)")
        reason = verdict.get("reason")
        verdicts.append({"criterion": name, "pass": verdict["pass"], "reason": reason if isinstance(reason, str)
                         else ""})
    return verdicts


class JudgeScorer(Scorer):
    """The judge as a scorer (settings: rmi_pipeline.settings.Judge). `cache` is any mapping from an answer's hash
    to its verdicts; hand in a persistent one so a re-evaluation costs nothing."""

    name = "judge"
    needs_target = False

    def __init__(self, settings, cache: MutableMapping[str, dict] | None = None, backoff_seconds: float = 0.25):
        if not settings.url:
            raise ScorerError("the judge scorer needs RMI_JUDGE_URL: the base URL of an OpenAI-compatible chat "
                              "endpoint (http://host:port/v1)")
        import openai

        self.settings, self.criteria = settings, parse_criteria(settings.criteria)
        self.cache: MutableMapping[str, dict] = {} if cache is None else cache
        self.backoff_seconds = backoff_seconds
        key = settings.api_key.get_secret_value() if settings.api_key else ""
        self._secret = key
        self._client = openai.OpenAI(base_url=settings.url, api_key=key or "none", timeout=settings.timeout_seconds,
                                     max_retries=0)
        self._usage = JudgeUsage()
        self._lock = threading.Lock()  # the counters and the handed-in cache, shared by score_many's threads

    def __repr__(self) -> str:
        return (f"<JudgeScorer {self.settings.model!r} at {self.settings.url!r}, criteria "
                f"{[name for name, _ in self.criteria]}>")

    @property
    def identity(self) -> str:
        """What a score by this judge depends on (its model and rubric): scores remembered under another are not
        reused."""
        what = json.dumps([self.settings.model, [list(c) for c in self.criteria]])
        return f"judge-{hashlib.sha256(what.encode()).hexdigest()[:16]}"

    def usage(self) -> dict:
        with self._lock:
            return asdict(self._usage)

    def key(self, input: str, output: str, target: str | None) -> str:
        """The cache key: a change of judge model or rubric is a new answer, the same item and answer are not."""
        what = [self.settings.model, [list(c) for c in self.criteria], input, target, output]
        return hashlib.sha256(json.dumps(what, ensure_ascii=False).encode()).hexdigest()

    def grade(self, input, output, target, metadata):
        key = self.key(input, output, target)
        with self._lock:
            known = self.cache.get(key)
            if known is not None:
                self._usage.cached += 1
        verdicts = known["verdicts"] if known is not None else self._ask(key, input, output, target)
        return self.value(verdicts)

    @staticmethod
    def value(verdicts: list[dict]) -> tuple[float, str]:
        passed = all(v["pass"] for v in verdicts)
        lines = "; ".join(f"{v['criterion']}: {'pass' if v['pass'] else 'fail'} ({v['reason'] or 'no reason'})"
                          for v in verdicts)
        return float(passed), lines

    def score_many(self, rows: Iterable[ScoreRequest]) -> list[tuple[float, str]]:
        """Every row scored, at most RMI_JUDGE_CONCURRENCY calls at once, one call per distinct answer; the
        verdicts that came back are cached before the first failure, if any, is raised. After GIVE_UP answers
        failed every attempt the rest are not asked: a judge that is down fails a run in seconds, not hours."""
        rows = list(rows)
        keys = [self.key(r.input, r.output, r.target) for r in rows]
        first = {}
        for index, key in enumerate(keys):
            first.setdefault(key, index)
        results: dict[str, tuple[float, str]] = {}
        errors: list[JudgeError] = []

        def one(index: int) -> None:
            if len(errors) >= GIVE_UP:
                return
            row = rows[index]
            try:
                results[keys[index]] = self.score(row.input, row.output, row.target, row.metadata)
            except JudgeError as error:
                errors.append(error)

        with ThreadPoolExecutor(self.settings.concurrency, thread_name_prefix="judge") as pool:
            list(pool.map(one, first.values()))
        if errors:
            asked = len(results) + len(errors)
            more = (f" ({len(errors)} of {asked} answers asked failed; this is the first"
                    + (f"; the other {len(first) - asked} were not asked" if asked < len(first) else "") + ")"
                    if len(errors) > 1 else "")
            raise JudgeError(f"{errors[0]}{more}") from errors[0]
        with self._lock:
            self._usage.cached += len(rows) - len(first)
        return [results[key] for key in keys]

    def _ask(self, key: str, input: str, output: str, target: str | None) -> list[dict]:
        """One answer's verdicts from the judge, retried on timeouts, HTTP errors and bad replies; a JudgeError
        naming the item's short hash and every attempt's reason when none worked."""
        import openai

        messages = [{"role": "system", "content": SYSTEM},
                    {"role": "user", "content": grading_prompt(input, output, target, self.criteria)}]
        reasons = []
        for attempt in range(self.settings.retries + 1):
            if attempt:
                time.sleep(min(self.backoff_seconds * 2 ** (attempt - 1), 5.0))
            started = time.monotonic()
            try:
                reply = self._client.chat.completions.create(
                    model=self.settings.model, messages=messages, temperature=0,
                    response_format={"type": "json_object"})
                self._count(attempt, time.monotonic() - started, reply.usage)
                verdicts = read_verdicts(reply.choices[0].message.content if reply.choices else None, self.criteria)
            except BadAnswer as bad:
                reasons.append(str(bad))
                continue
            except openai.APITimeoutError:
                self._count(attempt, time.monotonic() - started)
                reasons.append(f"timed out after {self.settings.timeout_seconds:g} s")
                continue
            except openai.APIStatusError as error:
                self._count(attempt, time.monotonic() - started)
                status = error.status_code
                hint = {401: " (the key was refused)", 403: " (the key was refused)",
                        404: " (is RMI_JUDGE_URL the API's base URL, ending in /v1?)"}.get(status, "")
                reasons.append(f"HTTP {status} from the judge{hint}")
                if status < 500 and status not in (408, 409, 429):
                    break  # the request itself is wrong: asking again gets the same answer
                continue
            except openai.APIConnectionError:
                self._count(attempt, time.monotonic() - started)
                reasons.append(f"could not connect to {self.settings.url}")
                continue
            with self._lock:
                self.cache[key] = {"verdicts": verdicts, "model": self.settings.model}
            return verdicts
        with self._lock:
            self._usage.failures += 1
        tried = len(reasons)
        message = (f"the judge gave no usable verdict for item {key[:12]} after {tried} attempt"
                   f"{'s' if tried > 1 else ''}: " + "; ".join(f"{i + 1}: {r}" for i, r in enumerate(reasons)))
        raise JudgeError(message.replace(self._secret, "***") if self._secret else message)

    def _count(self, attempt: int, seconds: float, usage=None) -> None:
        prompt = getattr(usage, "prompt_tokens", 0) or 0
        completion = getattr(usage, "completion_tokens", 0) or 0
        with self._lock:
            u = self._usage
            u.calls += 1
            u.retries += bool(attempt)
            u.seconds += seconds
            u.prompt_tokens += prompt
            u.completion_tokens += completion
            u.cost += (prompt * self.settings.input_price + completion * self.settings.output_price) / 1e6
