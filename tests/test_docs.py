"""The README documents what a user can set."""

import json
from pathlib import Path

from rmi_pipeline.recipes.hf import HFOptions
from rmi_pipeline.settings import Settings

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def shown(field) -> str:
    """A default as a user would write it in the environment (JSON for a mapping)."""
    value = field.get_default(call_default_factory=True)
    return json.dumps(value) if isinstance(value, dict) else str(value)


def test_every_setting_is_in_the_readme_with_its_default():
    for name, field in Settings.model_fields.items():
        assert f"| `RMI_{name.upper()}` | `{shown(field)}` |" in README, name


def test_the_hugging_face_recipe_settings_are_in_the_readme_with_their_defaults():
    for name, field in HFOptions.model_fields.items():
        assert f"| `RMI_HF_{name.upper()}` | `{shown(field)}` |" in README, name
