"""The team's model: what a team brings to the loop, a small causal LM fine-tuned on its old FAQ.

The FAQ covered only `known_share` of the products, plans and routes, in its own phrasings, so the model is right on
part of the team's eval file and wrong on the rest, which it can learn only from what users correct. It reads
`prompt + "\n"` and writes the answer and the end token, as the pipeline's Hugging Face recipe feeds it (no chat
template). Built from nothing on a CPU in seconds, the same for the same seed; to see its build time and score:

    python -m rmi_pipeline.world.catalogue.team_model
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path

from ...ml.tasks import Task
from ...recipes.hf.tiny import write_tiny_model
from .facts import PRICES, Catalogue
from .questions import ASKERS, FAQ, TOPICS, ask, every_question, facts, is_right, phrasings

ARCHITECTURE = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 4, "max_position_embeddings": 128}
VOCAB_SIZE = 600
IGNORE = -100  # the label of a token the loss skips: the prompt's and the padding's


def corpus(catalogue: Catalogue) -> list[str]:
    """The text the tokenizer learns from: every question in everyone's words with its answer, and every price a
    product may come to have, so a changed price is as few tokens as the old one."""
    lines = [f"{t.prompt}\n{t.answer}" for asker in ASKERS for t in every_question(catalogue, asker)]
    return lines + [f"${p}" for p in PRICES]


def old_faq(catalogue: Catalogue, rng: random.Random, known_share: float) -> tuple[list[Task], list[str]]:
    """The FAQ's questions (each known fact in each FAQ phrasing) and the keys of the facts it knew: the same
    share of each topic's subjects (a product, a plan, a route), each with all it says of them, so every topic
    starts part-known and an unknown fact cannot be pieced together from known ones."""
    known = []
    for topic in TOPICS:
        of_topic = [f for f in facts(catalogue) if f.topic == topic]
        subjects = sorted({f.subject for f in of_topic})
        chosen = set(rng.sample(subjects, round(known_share * len(subjects))))
        known += [f for f in of_topic if f.subject in chosen]
    return [ask(f, t) for f in known for t in phrasings(f.kind, FAQ)], [f.key for f in known]


def write_team_model(path: Path, catalogue: Catalogue, seed: int = 0, known_share: float = 0.4, steps: int = 250,
                     batch_size: int = 32, learning_rate: float = 3e-3) -> dict:
    """A save_pretrained directory (model and tokenizer) at `path`, fine-tuned on the old FAQ; returns what it
    learned from: the known facts' keys, the FAQ's size, the last loss and the seconds it took."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.monotonic()
    path = Path(path)
    write_tiny_model(path, corpus(catalogue), vocab_size=VOCAB_SIZE, architecture=ARCHITECTURE, seed=seed)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, use_safetensors=True)
    rng = random.Random(f"team-model-{seed}")
    faq, known = old_faq(catalogue, rng, known_share)
    loss = fine_tune(model, tokenizer, faq, rng, steps=steps, batch_size=batch_size, learning_rate=learning_rate,
                     seed=seed)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return {"known_facts": known, "faq_questions": len(faq), "final_loss": round(loss, 4),
            "seconds": round(time.monotonic() - started, 1)}


def fine_tune(model, tokenizer, tasks: list[Task], rng: random.Random, *, steps: int, batch_size: int = 32,
              learning_rate: float = 3e-3, seed: int = 0) -> float:
    """Train `model` in place on (prompt, answer) `tasks` as the team's model learned its FAQ: `steps` batches of
    `batch_size` rows drawn with `rng`, AdamW with 20 steps of warm-up then a linear decay, the loss on the answer
    and the end token only; torch seeded with `seed` inside (the caller's torch RNG is left as it was). Returns the
    last batch's loss. What write_team_model trains the first model with, and what a fine-tuned challenger uses."""
    import torch

    rows = [_row(tokenizer, t) for t in tasks]
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 20) * (1 - s / steps))
    model.train()
    loss = torch.tensor(float("nan"))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for _ in range(steps):
            ids, labels, mask = _batch([rows[rng.randrange(len(rows))] for _ in range(batch_size)],
                                       tokenizer.pad_token_id)
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
    return loss.item()


def _row(tokenizer, task: Task) -> tuple[list[int], list[int]]:
    """Token ids of prompt, newline, answer and end token, and the labels that score only the answer and the end."""
    head = tokenizer(task.prompt + "\n", add_special_tokens=False)["input_ids"]
    tail = tokenizer(task.answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return head + tail, [IGNORE] * len(head) + tail


def _batch(rows, pad_id: int):
    import torch

    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), width), pad_id)
    labels = torch.full((len(rows), width), IGNORE)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (row, label) in enumerate(rows):
        ids[i, :len(row)], labels[i, :len(row)], mask[i, :len(row)] = torch.tensor(row), torch.tensor(label), 1
    return ids, labels, mask


def answers(path: Path, prompts: list[str], max_new_tokens: int = 12, batch_size: int = 64) -> list[str]:
    """The model's greedy answers, read as the pipeline's recipe reads them: left-padded, cut at the end token."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path, use_safetensors=True).eval()
    out = []
    with torch.no_grad():
        for start in range(0, len(prompts), batch_size):
            batch = tokenizer([p + "\n" for p in prompts[start:start + batch_size]], return_tensors="pt",
                              padding=True, add_special_tokens=False)
            new = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
            out += [t.strip() for t in tokenizer.batch_decode(new[:, batch["input_ids"].shape[1]:],
                                                              skip_special_tokens=True)]
    return out


def score(path: Path, rows: list[dict]) -> float:
    """The share of eval rows ({"input", "target"}) the model at `path` answers right, by the world's own grader."""
    said = answers(path, [r["input"] for r in rows])
    tasks = [Task(r["input"], r["target"], skill=r.get("topic", ""), tier=None) for r in rows]
    return sum(is_right(t, s) for t, s in zip(tasks, said, strict=True)) / max(1, len(rows))


if __name__ == "__main__":  # the build time and the score on a fresh eval file, for the record
    from .curators import eval_rows
    from .facts import make_catalogue

    shop = make_catalogue(0)
    with tempfile.TemporaryDirectory() as tmp:
        info = write_team_model(Path(tmp), shop)
        rows = eval_rows(shop, random.Random("curators-0"))
        print({k: v for k, v in info.items() if k != "known_facts"}, "eval score", round(score(Path(tmp), rows), 3))
