"""`rmi serve` as OpenAI's clients use it, over real HTTP on 127.0.0.1, with the official `openai` SDK (sync, async
and streamed) and LangChain's ChatOpenAI: chats and completions answered by the champion and recorded, so that
feedback on a reply's id lands; n, max_tokens, temperature and seed honoured; usage in the recipe's tokens; the
model list; options it cannot honour refused with a 400 that names them. Untrained models: the shapes, not the
answers' quality, are under test."""

import asyncio
import io

import httpx
import polars as pl
import pytest
from gateway import gateway_in_thread, untrained_home
from openai import AsyncOpenAI, BadRequestError, NotFoundError, OpenAI

from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
from rmi_pipeline.recipes.completion import Decoding
from rmi_pipeline.resources import build_resources, layout
from rmi_pipeline.serving.process import wait_ready

R = ArithmeticRecipe()
ASKED = "5+123="  # the model reads "500+321=", 8 tokens, and writes 4 (the answer has a digit more than 123)


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    """A gateway over three untrained versions: v1 champion, v2 the canary (for half the users), v3 the
    challenger in shadow."""
    settings, registry = untrained_home(tmp_path_factory.mktemp("openai") / "home", 3, RMI_SERVE_SHADOW="true",
                                        RMI_CANARY_SHARE="0.5")
    registry.start_canary("2", {})
    registry.point("challenger", "3", {})
    with gateway_in_thread(settings) as url:
        wait_ready(url, "1", canary="2")
        yield {"url": url, "settings": settings, "name": settings.model_name,
               "champion": registry.load("1", R), "canary": registry.load("2", R)}


def sdk(api) -> OpenAI:
    return OpenAI(base_url=f"{api['url']}/v1", api_key="unused", max_retries=0)


def test_chats_and_completions_answer_as_the_champion_plain_streamed_and_async(api):
    """Pinned to the champion (NAME@champion), a completion and a chat answer what the champion answers; streamed,
    the chunks join to the same text and the same finish reason; the async client gets the same."""
    client, model, want = sdk(api), f"{api['name']}@champion", R.answer(api["champion"], [ASKED])[0]
    plain = client.completions.create(model=model, prompt=ASKED)
    assert plain.choices[0].text == want and plain.choices[0].finish_reason == "stop"
    assert plain.id == plain.choices[0].model_extra["response_id"] and plain.model == f"{api['name']}/1"
    streamed = list(client.completions.create(model=model, prompt=ASKED, stream=True))
    assert "".join(c.choices[0].text for c in streamed) == want and len(streamed) == len(want) + 1
    assert streamed[-1].choices[0].finish_reason == "stop"

    chat = [{"role": "system", "content": "You add numbers."}, {"role": "user", "content": ASKED}]
    reply = client.chat.completions.create(model=model, messages=chat)
    assert reply.choices[0].message.content == want and reply.choices[0].message.role == "assistant"
    chunks = list(client.chat.completions.create(model=model, messages=chat, stream=True,
                                                 stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want
    assert chunks[-1].choices == [] and chunks[-1].usage == reply.usage
    assert [c.choices[0].finish_reason for c in chunks[:-1]][-1] == "stop"

    async def asked_async():
        async with AsyncOpenAI(base_url=f"{api['url']}/v1", api_key="unused", max_retries=0) as aclient:
            chatted = await aclient.chat.completions.create(model=model, messages=chat)
            completed = await aclient.completions.create(model=model, prompt=[ASKED, "12+34="])
            stream = await aclient.chat.completions.create(model=model, messages=chat, stream=True)
            text = "".join([c.choices[0].delta.content or "" async for c in stream])
            return chatted.choices[0].message.content, [c.text for c in completed.choices], text

    assert asyncio.run(asked_async()) == (want, R.answer(api["champion"], [ASKED, "12+34="]), want)


def test_n_max_tokens_seed_and_usage_in_the_recipe_s_tokens(api):
    """n=2 gives two choices, each an answer of its own; max_tokens=1 stops after one token with "length"; usage
    counts the tokens the model reads and writes (not characters); a seed repeats a sampled answer."""
    client, model = sdk(api), f"{api['name']}@champion"
    two = client.completions.create(model=model, prompt=ASKED, n=2)
    assert [c.index for c in two.choices] == [0, 1]
    assert len({c.model_extra["response_id"] for c in two.choices}) == 2
    assert (two.usage.prompt_tokens, two.usage.completion_tokens) == (8, 8)  # the prompt read once, 2 x 4 written
    one = client.chat.completions.create(model=model, messages=[{"role": "user", "content": ASKED}],
                                         max_completion_tokens=1)
    cut = R.complete(api["champion"], [ASKED], Decoding(max_tokens=1))[0]
    assert (one.choices[0].finish_reason, one.choices[0].message.content) == ("length", cut.text)
    assert (one.usage.prompt_tokens, one.usage.completion_tokens, one.usage.total_tokens) == (8, 1, 9)
    sampled = [client.completions.create(model=model, prompt=[ASKED] * 8, temperature=1.5, seed=7, top_p=0.9)
               for _ in range(2)]
    assert [c.text for c in sampled[0].choices] == [c.text for c in sampled[1].choices]


def test_options_the_gateway_cannot_honour_are_refused_naming_them(api):
    client, name = sdk(api), api["name"]
    user = [{"role": "user", "content": ASKED}]
    refusals = {
        "logprobs": lambda: client.completions.create(model=name, prompt=ASKED, logprobs=2),
        "tools": lambda: client.chat.completions.create(model=name, messages=user, tools=[{"type": "function",
                                                        "function": {"name": "add", "parameters": {}}}]),
        "n": lambda: client.completions.create(model=name, prompt=[ASKED] * 40, n=2),  # 80 > 64 answers
        "messages": lambda: client.chat.completions.create(model=name, messages=[*user, {"role": "assistant",
                                                                                       "content": "128"}]),
        "response_format": lambda: client.chat.completions.create(model=name, messages=user,
                                                                  response_format={"type": "json_object"}),
        "model": lambda: client.chat.completions.create(model=f"{name}@challenger", messages=user),
    }
    for param, call in refusals.items():
        with pytest.raises(BadRequestError) as refused:
            call()
        assert refused.value.param == param and refused.value.message.startswith("Error code: 400"), param
        assert param in refused.value.body["message"]
    with pytest.raises(NotFoundError) as unknown:
        client.chat.completions.create(model="gpt-4o", messages=user)
    assert unknown.value.code == "model_not_found"


def test_the_model_list_names_the_champion_the_canary_and_the_challenger_with_their_versions(api):
    client, name = sdk(api), api["name"]
    listed = {m.id: (m.model_extra["alias"], m.model_extra["version"]) for m in client.models.list()}
    assert listed == {name: ("champion", "1"), f"{name}@champion": ("champion", "1"),
                      f"{name}@canary": ("canary", "2"), f"{name}@challenger": ("challenger", "3")}
    assert client.models.retrieve(f"{name}@canary").model_extra["version"] == "2"
    canary = client.completions.create(model=f"{name}@canary", prompt=ASKED)
    assert canary.choices[0].model_extra["model_version"] == "2"
    assert canary.choices[0].text == R.answer(api["canary"], [ASKED])[0]


def test_feedback_on_a_chat_answer_and_on_a_streamed_one_lands_saying_how_it_was_sampled_or_cut(api):
    """Each reply's id is a response id /v1/feedback takes, a streamed one's too (recorded before its first chunk);
    a sampled answer's event says its temperature and seed, as the explored ones' do; one that max_tokens cut says
    so (meta.cut), and only that one: the loop counts no thumb on it."""
    client, url = sdk(api), api["url"]
    user = [{"role": "user", "content": ASKED}]
    chat = client.chat.completions.create(model=api["name"], messages=user, temperature=0.8, seed=11,
                                          user="alice")
    stream = client.chat.completions.create(model=api["name"], messages=user, stream=True, user="bob")
    streamed_id = next(iter(stream)).id  # the answer is recorded before its first chunk: rate it at once
    stream.close()
    cut = client.completions.create(model=api["name"], prompt=ASKED, max_tokens=1, user="carol")
    assert cut.choices[0].finish_reason == "length"
    for response_id in (chat.id, streamed_id, cut.id):
        sent = httpx.post(f"{url}/v1/feedback", json={"response_id": response_id, "rating": "up"})
        assert sent.status_code == 202, sent.text
    httpx.post(f"{url}/v1/flush").raise_for_status()
    store = build_resources(api["settings"])["storage"]
    events = [e for key in store.list(layout.INCOMING)
              for e in pl.read_parquet(io.BytesIO(store.read_bytes(key))).to_dicts()]
    rated = {e["meta"]["response_id"]: e for e in events if e["rating"] == "up"}
    assert set(rated) == {chat.id, streamed_id, cut.id}
    assert [rated[i]["meta"].get("cut") for i in (chat.id, streamed_id, cut.id)] == [None, None, True]
    assert (rated[chat.id]["meta"]["temperature"], rated[chat.id]["meta"]["sample_seed"]) == (0.8, 11)
    assert rated[chat.id]["prompt"] == ASKED and rated[chat.id]["user_id"] == "alice"
    assert rated[chat.id]["completion"] == chat.choices[0].message.content


def test_langchain_s_chat_openai_talks_to_the_gateway(api):
    from langchain_openai import ChatOpenAI

    model = f"{api['name']}@champion"
    chat = ChatOpenAI(base_url=f"{api['url']}/v1", api_key="unused", model=model, max_retries=0)
    want = R.answer(api["champion"], [ASKED])[0]
    reply = chat.invoke(ASKED)
    assert reply.content == want and reply.response_metadata["finish_reason"] == "stop"
    assert reply.usage_metadata["input_tokens"] == 8
    assert "".join(chunk.content for chunk in chat.stream(ASKED)) == want
