"""A causal LM and its tokenizer, to answer with: what HFRecipe.load_model gives (serving, evaluation, an MLflow
client), without the LightningModule that trains it (hf/model.py), so such a process never imports Lightning; and
how either decodes answers (`generate`)."""

import torch

from ..completion import LENGTH, STOP, Completion, Decoding, stopped


class Answering(torch.nn.Module):
    def __init__(self, model, tokenizer):
        super().__init__()
        self.model, self.tokenizer = model, tokenizer


def generate(module, texts: list[str], decoding: Decoding, max_new_tokens: int, batch: int) -> list[Completion]:
    """Completions of the model inputs `texts` by `module` (an Answering or a LitCausalLM: a `model` and its
    `tokenizer`), `batch` rows a `generate` call, stripped of surrounding whitespace. One seed for all the rows:
    a row's sample depends on the rows decoded with it. A stop text ends a row's decoding where it appears (the
    text is cut before it); a row that reaches `max_new_tokens` without its end token ends with LENGTH."""
    model, tokenizer = module.model, module.tokenizer
    tokenizer.padding_side = "left"  # generation continues every row from its last real token
    was_training = model.training
    model.eval()
    how = {"do_sample": False} if decoding.greedy else {
        "do_sample": True, "temperature": decoding.temperature, "top_k": None,
        "top_p": decoding.top_p if decoding.top_p < 1 else None}
    if decoding.stop:
        how.update(stop_strings=list(decoding.stop), tokenizer=tokenizer)
    ends = {tokenizer.eos_token_id, tokenizer.pad_token_id}
    out: list[Completion] = []
    device = next(model.parameters()).device
    with torch.no_grad(), torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(decoding.seed)
        for start in range(0, len(texts), batch):
            rows = tokenizer(texts[start:start + batch], return_tensors="pt", padding=True,
                             add_special_tokens=False).to(device)
            new = model.generate(**rows, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                                 eos_token_id=tokenizer.eos_token_id, **how)[:, rows["input_ids"].shape[1]:]
            for ids, text in zip(new.tolist(), tokenizer.batch_decode(new, skip_special_tokens=True), strict=True):
                decoded = next((i for i, token in enumerate(ids) if token in ends), len(ids))
                text, at = stopped(text, decoding.stop)
                ended = at is not None or decoded < max_new_tokens
                # generate ends a row at a stop text without saying so: with stop texts asked, a row that ended
                # early is taken as cut unless its end token is seen to end it (not where padding is that token)
                seen_end = decoded < len(ids) and ids[decoded] == tokenizer.eos_token_id != tokenizer.pad_token_id
                cut = (at is not None or (bool(decoding.stop) and ended and not seen_end)
                       or (not ended and decoding.max_tokens is not None))
                out.append(Completion(text.strip(), decoded, STOP if ended else LENGTH, cut))
    model.train(was_training)
    return out
