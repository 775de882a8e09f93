"""The README documents what a user can set."""

from pathlib import Path

from rmi_pipeline.settings import Settings

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_every_setting_is_in_the_readme_with_its_default():
    for name, field in Settings.model_fields.items():
        assert f"| `RMI_{name.upper()}` | `{field.default}` |" in README, name
