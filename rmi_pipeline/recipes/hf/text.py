"""Any Hugging Face causal LM on free text: a recipe that is only a model (the core of the contract, no capability).

    RMI_RECIPE=rmi_pipeline.recipes.hf.text:TextRecipe RMI_HF_MODEL=/path/to/save_pretrained/folder rmi run

A team with a production assistant brings its model and nothing else: no task generator, no verifier. Its users'
feedback, its eval file and a judge carry the loop; every prompt is in one slice, `all/1` (base.ONE_SKILL).
Prompts reach the model as HFRecipe.model_input puts them: the tokenizer's chat template, else the prompt and a
newline.
"""

from __future__ import annotations

import unicodedata

from .recipe import HFRecipe

MAX_PROMPT_CHARS = 4000  # a question with its context pasted in; longer ones are documents, not prompts
MAX_COMPLETION_CHARS = 2000  # a long answer; a training target longer than this is not one the model should learn


class TextRecipe(HFRecipe):
    name = "text"
    max_answer_tokens = 256  # room for a paragraph: an answer cut short reads as a wrong one

    def base_model(self, size, path):
        # checkpoints carry the model from the first one on: only the first model needs RMI_HF_MODEL
        raise RuntimeError("the text recipe has no model of its own: set RMI_HF_MODEL to your model's directory "
                           "(a save_pretrained folder, or a hub id where this machine reaches a hub)")

    def is_valid_prompt(self, prompt):
        return bool(prompt.strip()) and len(prompt) <= MAX_PROMPT_CHARS

    def is_valid_completion(self, completion):
        return bool(completion.strip()) and len(completion) <= MAX_COMPLETION_CHARS

    def canonical(self, prompt):
        # the same question typed with other case, width, ligatures or spacing is the same question
        return " ".join(unicodedata.normalize("NFKC", prompt).casefold().split())

    def example_prompt(self):
        return "What can you help me with?"
